"""Grading: the scorers and the default cascade (`grader`, `freetext`), a run's scores (`scoring`), the judge stage
(`judging`), and the audit tools (`audit`, `vet`)."""
