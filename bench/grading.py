"""How far the default grading cascade can be trusted: every rule's decided share and precision, with its lower
bound, on each labelled set (tests/grading_sets.py; the sets' READMEs say where the answers came from and how they
were labelled), and how fast `nspec.grade` is.

- the calibration table: what each rule finds on the calibration sets (NIAN's calibration half and the local
  models' answers) before calibration holds any back, and whether its lower bound clears the target, so that it
  decides (`--write` stores it in src/nspec/runners/grading/calibration.json, which grading reads);
- per set, per rule and overall: what `nspec.grade` decides, and how often it agrees with the label.

A rule's precision is the share of its verdicts that agree with the label; its decided share, the share of the set's
answers it decided. Run: .venv/bin/python bench/grading.py [--markdown] [--write] [--wrong SET] [--speed]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nspec.runners.grading import calibration  # noqa: E402
from nspec.runners.grading.calibration import TARGET, Tally, key_of  # noqa: E402
from tests.grading_sets import CALIBRATION, SETS, Labelled, decided_by_kind, of, overall, tallies  # noqa: E402

STORED = ROOT / "src" / "nspec" / "runners" / "grading" / "calibration.json"


def _row(cells: list[str], markdown: bool, widths: list[int]) -> str:
    if markdown:
        return "| " + " | ".join(cells) + " |"
    return " ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))


def _table(header: list[str], rows: list[list[str]], markdown: bool) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [_row(header, markdown, widths)]
    if markdown:
        lines.append("|" + " --- |" * len(header))
    return lines + [_row(r, markdown, widths) for r in rows]


def calibration_table(found: dict[str, Tally], markdown: bool) -> list[str]:
    """What each rule finds on the calibration sets, and whether it decides."""
    header = ["rule → verdict", "found", "right", "precision", "lower bound", "95% bound", "decides"]
    rows = []
    for key, t in sorted(found.items()):
        own = not key.startswith("negative.")  # a negative control's grade is nspec's definition: it always decides
        decides = ("yes" if t.lower >= TARGET else "no") if own else "always"
        rows.append(
            [key, str(t.decided), str(t.agree), f"{t.precision:.2%}", f"{t.lower:.2%}", f"{t.lower95:.2%}", decides]
        )
    return _table(header, rows, markdown)


def set_table(rows: list[Labelled], markdown: bool) -> list[str]:
    """Per rule, what `nspec.grade` decides of a set, and how often it agrees; and how many distinct answers (to
    their question) it decided, as trials repeat answers."""
    header = ["rule → verdict", "decided", "distinct", "share", "precision", "lower bound", "95% bound", "wrong"]
    distinct: dict[str, set[tuple[str | None, str]]] = defaultdict(set)
    for row in rows:
        verdict = row.graded()
        if verdict.verdict != "undecided":
            distinct[key_of(verdict)].add((row.inp.question, row.answer))
    lines = []
    for key, t in sorted(tallies(rows).items()):
        share = t.decided / len(rows)
        cells = [key, str(t.decided), str(len(distinct[key])), f"{share:.1%}", f"{t.precision:.2%}"]
        lines.append([*cells, f"{t.lower:.2%}", f"{t.lower95:.2%}", str(t.decided - t.agree)])
    return _table(header, lines, markdown)


def summary(name: str, rows: list[Labelled]) -> str:
    c = overall(rows)
    t = Tally(c["decided"], c["agree"])
    distinct = len({(r.inp.question, r.answer) for r in rows})
    return (
        f"{name}: {c['answers']} answers ({distinct} distinct), {c['decided']} decided "
        f"({c['decided'] / max(c['answers'], 1):.1%}), "
        f"{c['agree']} agree with the label ({t.precision:.2%}; lower bound {t.lower:.2%}, 95% {t.lower95:.2%}), "
        f"{c['decided'] - c['agree']} wrong"
    )


def speed() -> str:
    """The mean time `nspec.grade` takes per answer over the calibration sets."""
    rows = of(*CALIBRATION)
    start = time.perf_counter()
    for row in rows:
        row.graded()
    per = (time.perf_counter() - start) / len(rows)
    return f"nspec.grade: {per * 1000:.3f} ms per answer on average over {len(rows)} answers of the calibration sets"


def write(found: dict[str, Tally]) -> None:
    """Store what each rule found on the calibration sets; then, graded by the rules as stored, what the cascade
    decides of each kind of answer there."""
    rules = {key: {"decided": t.decided, "agree": t.agree} for key, t in sorted(found.items())}
    note = "written by bench/grading.py --write from the calibration sets (tests/grading_sets.py)"

    def store(kinds: dict[str, dict[str, int]]) -> None:
        STORED.write_text(json.dumps({"note": note, "rules": rules, "kinds": kinds}, indent=1) + "\n", "utf-8")
        calibration.stored.cache_clear()

    store({})  # the kinds' figures are graded by the rules stored here
    store(decided_by_kind())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--markdown", action="store_true", help="tables as Markdown (docs/scoring.md)")
    parser.add_argument("--write", action="store_true", help="store the calibration table that grading reads")
    parser.add_argument("--wrong", choices=sorted(SETS), help="list every decided answer of a set that disagrees")
    parser.add_argument("--speed", action="store_true", help="time nspec.grade over the calibration sets")
    args = parser.parse_args()
    found = tallies(of(*CALIBRATION), calibrated=False)
    if args.write:
        write(found)
    print(f"Calibration: what each rule finds on {', '.join(CALIBRATION)}, and whether it decides")
    print(f"(lower bound: Wilson, {calibration.Z:g} standard error below; a rule decides where it is ≥ {TARGET:.1%})\n")
    print("\n".join(calibration_table(found, args.markdown)))
    for name, title in SETS.items():
        rows = of(name)
        print(f"\n{title} ({name}): what nspec.grade decides\n")
        print("\n".join(set_table(rows, args.markdown)))
        print(summary(name, rows))
    nian_all = of("nian-calibration", "nian-held-out")
    print()
    print(summary("NIAN, both halves", nian_all))
    present = [r for r in of("local") if not r.negative]
    print(summary("local single-fact needles, needle present", present))
    print(summary("all sets", list(of(*SETS))))
    if args.speed:
        print("\n" + speed())
    if args.wrong:
        for row in of(args.wrong):
            verdict = row.graded()
            if verdict.verdict not in ("undecided", row.label):
                print(f"\n{row.id} [{verdict.rule}: {verdict.reason}] label {row.label}")
                print(f"  Q: {row.inp.question}  E: {row.inp.expected}\n  A: {row.answer!r}")


if __name__ == "__main__":
    main()
