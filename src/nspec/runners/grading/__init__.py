"""Grading: one answer graded by a scoring list (`grader`, `nspec.grade`); nspec's own scorers and metrics, registered
as plugins are (`text`, the default cascade in `cascade` and `freetext`, `ruler`, `openai_graders`, `builtin`); a
run's scores (`scoring`), the judge stage (`judging`), and the audit tools (`audit`, `vet`)."""
