"""Runs the shell examples of the README and docs/ and compares their output with what the page shows.

A document's examples are its fenced ```bash blocks, in page order. Each block either runs, or is marked as an
illustration by an HTML comment on the line before it, ``<!-- not run: the reason -->`` (installing, the whole test
suite, a file name made up for the example). A ```text block right after a bash block is what that block prints:
each of its lines must appear in the output, in order (stdout first tried, then stderr), with

- ``…`` matching any text (a timing, a path, the rest of a long line); a line that is only ``…`` says lines were cut;
- runs of spaces counting as one (tables may re-align);
- every number within 2% (or half a unit of its last printed digit, whichever is larger) of the one shown.

Lines the page leaves out are not checked: a new line in the CLI's output (a "Speed:" line) needs no README edit. A
block exits 0 unless the marker says otherwise: ``<!-- exit 4 -->``.

The blocks of one document run one after another in one fresh folder, with ``ortlab`` on the PATH (this checkout's,
through the running Python), ``$R`` set to the repository (the docs copy stand-ins from ``$R``) and a fresh
``$ORTLAB_HOME``.

The shown output was recorded as ortlab plans for an AVX2-only x86 CPU, and the run pins that on every machine:
``$ORTLAB_CPU`` is :data:`DOC_CPU` (``avx2``). On a CPU with VNNI ortlab's int8 default is full range, without it
reduce-range (7-bit weights): the SQNR, the verdicts, a detector's F1 and tune's suggested command line differ
between the two, and a CPU with bf16 adds an "OpenVINO bf16" benchmark row. Reduce-range int8 computes the same
integers with or without VNNI (7-bit weights cannot saturate the 16-bit sums), so pinned, those numbers hold on
every x86 CPU; the kernels still run on this one, so times and speed-ups are cut with ``…``. The speed step
(optimize's timing against the source, compare's until-settled timing) runs as a user's does, only shorter
(``$ORTLAB_SPEED_CHECK_S`` is :data:`SPEED_CHECK_S`): a timing that fails fails the block.

Refresh the shown output after a deliberate change of the CLI's wording (it rewrites only the lines that no longer
match, keeps the page's ``…`` cuts, and prints what it changed; review with ``git diff``)::

    python -m tests.support.doc_examples --update README.md docs/OWN_MODEL.md
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC_CPU = "avx2"  # the CPU kind ($ORTLAB_CPU) the shown output was recorded for; see the module's text
SPEED_CHECK_S = "1"  # the speed step runs as a user's does (the suite turns it off elsewhere), only shorter
ELLIPSIS = "…"
REL_TOL = 0.02
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"^<!--\s*(not run|exit)\s*:?\s*(.*?)\s*-->\s*$")
_NUMBER_RE = r"(?<![\d.,])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d])"  # 78,330 is one number
_NUMBER = re.compile(_NUMBER_RE)
SHELLS = ("bash", "sh", "shell", "console")


@dataclass
class Example:
    """One bash block of a document, its shown output (if any) and its marker."""

    doc: Path
    line: int  # 1-based line of the opening fence
    command: str
    output: str | None = None
    output_lines: tuple[int, int] | None = None  # 0-based [start, end) of the output's lines in the document
    not_run: str | None = None
    exit_code: int = 0

    @property
    def where(self) -> str:
        return f"{self.doc.name}:{self.line}"


@dataclass
class Outcome:
    """What a run example printed, and the shown lines it did not print."""

    example: Example
    returncode: int
    stdout: str
    stderr: str
    missing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.returncode == self.example.exit_code and not self.missing

    def report(self) -> str:
        out = [f"{self.example.where}: exit {self.returncode} (expected {self.example.exit_code})"]
        out += [f"  not printed: {m}" for m in self.missing]
        if self.missing or self.returncode != self.example.exit_code:
            out.append("  --- stdout ---\n" + self.stdout[-4000:] + "  --- stderr ---\n" + self.stderr[-2000:])
        return "\n".join(out)


def parse(doc: Path) -> list[Example]:
    """The bash blocks of ``doc`` with their shown output and markers."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    blocks: list[tuple[str, int, int]] = []  # (language, first content line, end line) 0-based
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        blocks.append((m.group(1), i + 1, j))
        i = j + 1
    examples: list[Example] = []
    for k, (lang, start, end) in enumerate(blocks):
        if lang not in SHELLS:
            continue
        ex = Example(doc, start, "\n".join(lines[start:end]))
        before = next((ln for ln in reversed(lines[:start - 1]) if ln.strip()), "")
        if (m := _MARKER.match(before.strip())) is not None:
            if m.group(1) == "not run":
                ex.not_run = m.group(2) or "no reason given"
            else:
                ex.exit_code = int(m.group(2))
        if k + 1 < len(blocks) and blocks[k + 1][0] == "text" and not any(
                ln.strip() for ln in lines[end + 1:blocks[k + 1][1] - 1]):
            t_start, t_end = blocks[k + 1][1], blocks[k + 1][2]
            ex.output, ex.output_lines = "\n".join(lines[t_start:t_end]), (t_start, t_end)
        examples.append(ex)
    return examples


def _squash(line: str) -> str:
    return " ".join(line.split())


def line_pattern(shown: str) -> re.Pattern[str]:
    """The regular expression a shown line stands for: ``…`` any text, numbers captured, spaces collapsed."""
    parts: list[str] = []
    for piece in re.split(f"({ELLIPSIS})", _squash(shown)):
        if piece == ELLIPSIS:
            parts.append(".*?")
            continue
        pos = 0
        for m in _NUMBER.finditer(piece):
            parts.append(re.escape(piece[pos:m.start()]))
            parts.append(f"({_NUMBER_RE})")
            pos = m.end()
        parts.append(re.escape(piece[pos:]))
    return re.compile("".join(parts).replace(r"\ ", " "))


def _close(got: str, shown: str) -> bool:
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    a, b = float(got.replace(",", "")), float(shown.replace(",", ""))
    return abs(a - b) <= max(REL_TOL * abs(b), 0.5 * 10 ** -decimals + 1e-12)


def line_matches(shown: str, printed: str) -> bool:
    """Whether ``printed`` is what ``shown`` shows (see the module's rules)."""
    m = line_pattern(shown).fullmatch(_squash(printed))
    if m is None:
        return False
    wanted = _NUMBER.findall(_squash(shown).replace(ELLIPSIS, " "))
    return all(_close(g, w) for g, w in zip(m.groups(), wanted))


def _shown_lines(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.strip() and ln.strip() != ELLIPSIS]


def missing_lines(output: str, stdout: str, stderr: str) -> list[str]:
    """The shown lines not printed, in order: each is looked for after the previous match in stdout, else in
    stderr."""
    streams = [stdout.splitlines(), stderr.splitlines()]
    cursors = [0, 0]
    missing = []
    for shown in _shown_lines(output):
        for s, lines in enumerate(streams):
            hit = next((i for i in range(cursors[s], len(lines)) if line_matches(shown, lines[i])), None)
            if hit is not None:
                cursors[s] = hit + 1
                break
        else:
            missing.append(shown)
    return missing


def _shim(bin_dir: Path) -> None:
    exe = bin_dir / "ortlab"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ortlab "$@"\n')
    exe.chmod(0o755)


def run_document(doc: Path, workdir: Path, timeout: float = 600) -> list[Outcome]:
    """Runs every example of ``doc`` not marked "not run", in order, in ``workdir``."""
    (workdir / "bin").mkdir(parents=True, exist_ok=True)
    (workdir / "folder").mkdir(exist_ok=True)
    _shim(workdir / "bin")
    env = {**os.environ, "PATH": f"{workdir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", "R": str(ROOT),
           "ORTLAB_HOME": str(workdir / "home"), "PYTHONPATH": os.pathsep.join(
               [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]), "COLUMNS": "120", "ORTLAB_CPU": DOC_CPU,
           "ORTLAB_SPEED_CHECK_S": SPEED_CHECK_S}
    outcomes = []
    for ex in parse(doc):
        if ex.not_run is not None:
            continue
        proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", ex.command], cwd=workdir / "folder", env=env,
                              capture_output=True, text=True, timeout=timeout)
        missing = missing_lines(ex.output, proc.stdout, proc.stderr) if ex.output is not None else []
        outcomes.append(Outcome(ex, proc.returncode, proc.stdout, proc.stderr, missing))
    return outcomes


def _rewrite(shown: str, printed: str) -> str:
    """``printed`` with the cuts (``…``) ``shown`` made, where the two still line up word by word."""
    if ELLIPSIS not in shown:
        return printed.rstrip()
    a = shown.split()
    spans = [m.span() for m in re.finditer(r"\S+", printed)]
    b = [printed[i:j] for i, j in spans]
    out: list[int | str] = []  # indices of printed words, or a shown word with its cut
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        cut = next((k for k in range(i1, i2) if ELLIPSIS in a[k]), None)
        if op == "equal" or cut is None:
            out += range(j1, j2)
            continue
        head, tail = cut - i1, i2 - cut - 1  # words shown before and after the cut, taken from the printed line
        if head + tail > j2 - j1:
            out.append(a[cut])
            continue
        out += [*range(j1, j1 + head), a[cut], *range(j2 - tail, j2)]
    text = printed[:spans[0][0]] if spans else ""
    for n, item in enumerate(out):
        prev = out[n - 1] if n else None
        if n:
            same_run = isinstance(item, int) and isinstance(prev, int) and item == prev + 1
            text += printed[spans[prev][1]:spans[item][0]] if same_run else " "  # type: ignore[index]
        text += b[item] if isinstance(item, int) else item
    return text


def update_document(doc: Path, outcomes: list[Outcome]) -> list[str]:
    """Rewrites the shown lines of ``doc`` that its outcomes did not print; returns what changed."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    changes = []
    for o in outcomes:
        if not o.missing or o.example.output_lines is None:
            continue
        printed = o.stdout.splitlines() + o.stderr.splitlines()
        start, end = o.example.output_lines
        for k in range(start, end):
            shown = lines[k]
            if shown not in o.missing:
                continue
            best = max(printed, key=lambda p: difflib.SequenceMatcher(a=_squash(shown), b=_squash(p)).ratio(),
                       default="")
            if difflib.SequenceMatcher(a=_squash(shown), b=_squash(best)).ratio() < 0.5:
                changes.append(f"{doc.name}:{k + 1}: no printed line resembles it, edit by hand: {shown}")
                continue
            lines[k] = _rewrite(shown, best)
            changes.append(f"{doc.name}:{k + 1}:\n  - {shown}\n  + {lines[k]}")
    doc.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.doc_examples", description=__doc__.split("\n")[0])
    parser.add_argument("docs", nargs="*", type=Path, default=[ROOT / "README.md", ROOT / "docs" / "OWN_MODEL.md"])
    parser.add_argument("--update", action="store_true", help="rewrite the shown lines that no longer match")
    args = parser.parse_args(argv)
    failed = 0
    for doc in args.docs:
        with tempfile.TemporaryDirectory(prefix="ortlab-doc-") as tmp:
            outcomes = run_document(doc.resolve(), Path(tmp))
        for o in outcomes:
            if not o.ok:
                print(o.report())
        if args.update:
            for change in update_document(doc.resolve(), outcomes):
                print(change)
        failed += sum(not o.ok for o in outcomes if o.returncode != o.example.exit_code or not args.update)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
