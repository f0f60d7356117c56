"""Soak of stops under load (issue 26): two browser sessions and the CLI, side by side on one ORTLAB_HOME, each run
a demo (or optimize), a benchmark and a short tune, with one Cancel and one time limit each, for a few minutes.
Afterwards: 0 runs lost (every run folder with a result is in History with its files, nothing left to adopt), 0
processes of ours left, and the server's memory (RSS, sampled every second) bounded.

The time limit ($ORTLAB_RUN_TIMEOUT_S) is read by the process that starts a run, so for the browser sessions it is
the server's environment. The design: two servers on the same home, the main one with no limit and a second one
started with the limit (reached through a symlink to the home, so its log and processes are told apart). Each
browser session runs the demo, the benchmark (cancelled while it times) and the tune on the main server, and the
demo once more on the limited server, where the limit stops it. The CLI runs ``optimize`` on the digits sample, a
``bench`` stopped with Ctrl-C (SIGINT, what Cancel is in a terminal), a ``tune`` with ``--max-trials 2``, and an
``optimize`` under the limit.

    python bench/soak_stop.py [--limit-s 3] [--soak-s 300] [--keep]

Needs chromium and playwright (as tests/browser). Prints one summary; exits 1 when a run was lost, a process was
left or a step failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ortlab.model.inspect import sha256_file  # noqa: E402
from ortlab.runs import run_recovery, service  # noqa: E402
from ortlab.runs.artifact import Artifact  # noqa: E402
from ortlab.runs.workspace import Workspace  # noqa: E402
from ortlab.runtime.child import STOP_GRACE_S  # noqa: E402
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, LAPTOP, browser_missing, start_app  # noqa: E402
from tests.browser.test_browser import POINTS_JS, STEP_TIMEOUT_MS, button, go_to, wait_quiet  # noqa: E402

TUNE_TRIALS = 2
TUNE_BUDGET_S = 40
BENCH_S = 30  # long enough that the Cancel lands while it times


@dataclass
class Actor:
    """One actor's jobs: (what, outcome, seconds) in order, and how many of each kind of stop it did."""

    name: str
    jobs: list[tuple[str, str, float]] = field(default_factory=list)
    cancels: int = 0
    limits: int = 0
    failures: list[str] = field(default_factory=list)

    def step(self, what: str, fn) -> None:
        began = time.monotonic()
        try:
            outcome = fn()
        except Exception as e:  # one failed step is reported, the soak goes on
            outcome = f"FAILED: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            self.failures.append(f"{what}: {outcome}")
        self.jobs.append((what, outcome, time.monotonic() - began))
        print(f"[{time.strftime('%H:%M:%S')}] {self.name}: {what} -> {outcome} ({time.monotonic() - began:.0f} s)",
              flush=True)


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def ms(self, want_ms: float) -> float:
        """``want_ms``, cut to what is left of the soak (at least 5 s, so a step can still say why it failed)."""
        return max(5_000.0, min(want_ms, (self.end - time.monotonic()) * 1000))


# --- the browser sessions -------------------------------------------------------------------------------------


def _open(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=STEP_TIMEOUT_MS)
    wait_quiet(page)


def _click_demo(page, dl: Deadline) -> None:
    """Click the Model page's demo button once it is drawn: a fresh server's first page imports the engine, which
    takes well over the 30 s step timeout on a loaded machine."""
    page.locator(".st-key-demo_run button").first.wait_for(state="visible", timeout=dl.ms(120_000))
    button(page, ["demo_run"], re.compile("demo", re.I)).click()


def _demo(page, url: str, dl: Deadline) -> str:
    _open(page, url)
    _click_demo(page, dl)
    page.wait_for_url(re.compile(r"/compare/?$"), timeout=dl.ms(240_000))
    wait_quiet(page)
    return "done"


def _bench_cancelled(page, dl: Deadline) -> str:
    go_to(page, "Benchmark", "benchmark")
    duration = page.get_by_label(re.compile(r"^Duration")).first
    duration.fill(str(BENCH_S))
    duration.press("Enter")
    wait_quiet(page)
    button(page, ["bench.run"], re.compile(r"Run benchmark")).click()
    page.wait_for_function(f"() => ({POINTS_JS})() > 0", timeout=dl.ms(120_000))  # it times (not queued)
    cancel = page.locator(".st-key-bench-cancel button")
    cancel.first.click(timeout=STEP_TIMEOUT_MS)
    clicked = time.monotonic()
    page.locator(".st-key-bench-cancel").first.wait_for(state="detached", timeout=dl.ms(60_000))
    return f"cancelled, ended {time.monotonic() - clicked:.1f} s after the click"


def _demo_limited(page, url: str, dl: Deadline) -> str:
    _open(page, url)
    _click_demo(page, dl)
    said = page.get_by_text(re.compile(r"stopped after \d+ s \(limit \d+ s\)"))
    said.first.wait_for(state="visible", timeout=dl.ms(120_000))
    if re.search(r"/compare/?$", page.url):
        raise AssertionError("the demo stopped by its limit landed on Compare")
    return "stopped: " + said.first.inner_text()[:90].replace("\n", " ")


def _tune(page, dl: Deadline) -> str:
    go_to(page, "Tune", "tune")
    for label, value in (("Time budget (s)", TUNE_BUDGET_S), (re.compile(r"^Max trials"), TUNE_TRIALS),
                         ("Keep-in-float steps", 0)):
        box = page.get_by_label(label).first
        box.fill(str(value))
        box.press("Tab")
    page.get_by_role("button", name=re.compile("Start tuning")).first.click()
    page.locator(".st-key-tune-cancel").first.wait_for(state="visible", timeout=STEP_TIMEOUT_MS)
    page.locator(".st-key-tune-cancel").first.wait_for(state="detached", timeout=dl.ms(300_000))
    wait_quiet(page)
    text = page.evaluate("() => document.body.innerText")
    found = re.search(r"(Recommend|Stopped after|No trial|No recipe)[^\n]*", text)
    return "done" + (f": {found.group(0)[:100]}" if found else "")


def browser_actor(actor: Actor, main_url: str, limited_url: str, dl: Deadline) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=LAPTOP, service_workers="block")
        page = context.new_page()
        page.set_default_timeout(STEP_TIMEOUT_MS)
        actor.step("demo", lambda: _demo(page, main_url, dl))
        actor.step("benchmark + Cancel", lambda: _bench_cancelled(page, dl))
        actor.cancels += 1
        limited = context.new_page()  # the same browser session, on the limited server; the first page keeps its own
        limited.set_default_timeout(STEP_TIMEOUT_MS)
        actor.step("demo under the time limit", lambda: _demo_limited(limited, limited_url, dl))
        actor.limits += 1
        actor.step("tune", lambda: _tune(page, dl))
        context.close()
        browser.close()


# --- the CLI --------------------------------------------------------------------------------------------------


def cli_actor(actor: Actor, env: dict[str, str], out: Path, limit_s: float, dl: Deadline) -> None:
    cli = [sys.executable, "-m", "ortlab"]

    def run(args: list[str], extra: dict[str, str] | None = None, interrupt: bool = False):
        proc = subprocess.Popen([*cli, *args], cwd=REPO, env={**env, **(extra or {})}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
        reader.start()
        sent = None
        if interrupt:  # Ctrl-C 3 s after the bench said it began (-v), so it lands while the child times
            until = time.monotonic() + 120
            while not any("ortlab: bench" in line for line in lines) and proc.poll() is None \
                    and time.monotonic() < until:
                time.sleep(0.1)
            time.sleep(3)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                sent = time.monotonic()
        proc.wait(timeout=max(5.0, dl.end - time.monotonic()))
        reader.join(5)
        return proc.returncode, "".join(lines), (time.monotonic() - sent if sent else None)

    def optimize() -> str:
        rc, text, _ = run(["optimize", "digits_cnn", str(out / "int8.onnx"), "--precision", "int8"])
        if rc != 0:
            raise RuntimeError(f"exit {rc}: {text[-300:]}")
        return "done, " + (re.findall(r"history\s+(run \d+)", text) or ["no history line"])[-1]

    def bench_interrupted() -> str:
        rc, text, after = run(["bench", "digits_cnn", "--duration", str(BENCH_S), "-v"], interrupt=True)
        if after is None:
            raise RuntimeError(f"the bench ended before Ctrl-C (exit {rc})")
        if rc == 0 or "Traceback" in text:
            raise RuntimeError(f"exit {rc} after Ctrl-C: {text[-300:]}")
        return f"Ctrl-C, exit {rc} {after:.1f} s after it: {text.strip().splitlines()[-1][:90]}"

    def tune() -> str:
        rc, text, _ = run(["tune", "digits_cnn", "--max-trials", str(TUNE_TRIALS), "--budget", str(TUNE_BUDGET_S),
                           "--exclusion-steps", "0", "--out", str(out / "tune"), "--json"])
        if rc not in (0, 1):
            raise RuntimeError(f"exit {rc}: {text[-300:]}")
        trials = re.findall(r'"run_id":\s*(\d+)', text)
        return f"exit {rc}, run ids {sorted(set(map(int, trials)))}"

    def optimize_limited() -> str:
        rc, text, _ = run(["optimize", "digits_cnn", str(out / "limited.onnx"), "--precision", "int8"],
                          extra={service.RUN_TIMEOUT_VAR: f"{limit_s:g}"})
        said = re.search(r"stopped after \d+ s \(limit \d+ s\)", text)
        if rc == 0 or not said:
            raise RuntimeError(f"exit {rc}, not stopped by the limit: {text[-300:]}")
        return f"exit {rc}: {said.group(0)}"

    actor.step("optimize", optimize)
    actor.step("bench + Ctrl-C", bench_interrupted)
    actor.cancels += 1
    actor.step("optimize under the time limit", optimize_limited)
    actor.limits += 1
    actor.step("tune", tune)


# --- what is checked around and after ---------------------------------------------------------------------------


def _proc_text(pid: str, name: str) -> str:
    try:
        return (Path("/proc") / pid / name).read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def our_processes(marks: list[str]) -> list[tuple[int, str]]:
    """Live processes (not zombies) other than this one whose arguments or environment name one of ``marks``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        stat = _proc_text(entry.name, "stat")
        if not stat or stat.rsplit(")", 1)[-1].split()[0] == "Z":
            continue
        args, environ = _proc_text(entry.name, "cmdline"), _proc_text(entry.name, "environ")
        if any(m in args or m in environ for m in marks):
            found.append((int(entry.name), args[:160]))
    return found


def server_pid(url: str) -> int:
    port = url.rsplit(":", 1)[1]
    for pid, args in our_processes([f"--server.port {port} "]):
        if "streamlit" in args:
            return pid
    raise RuntimeError(f"no streamlit process on port {port}")


class RssSampler(threading.Thread):
    """VmRSS of the given processes every second: first, peak and last (MB) of each."""

    def __init__(self, pids: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.pids, self.samples = pids, {name: [] for name in pids}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for name, pid in self.pids.items():
                found = re.search(r"VmRSS:\s+(\d+) kB", _proc_text(str(pid), "status"))
                if found:
                    self.samples[name].append(int(found.group(1)) / 1024)
            self.stop.wait(1.0)

    def summary(self) -> str:
        return "; ".join(f"{name} {s[0]:.0f} / {max(s):.0f} / {s[-1]:.0f} MB (half-way {s[len(s) // 2]:.0f} MB, "
                         f"{len(s)} samples)"
                         for name, s in self.samples.items() if s)


def check_history(home: Path) -> tuple[list[str], dict[str, int]]:
    """(problems, runs recorded by where they were started): every folder with a result is a row, every row's model is
    there with its hash, nothing is marked running, nothing is left to adopt."""
    ws = Workspace(home)
    rows = ws.history().list()
    runs = [r for r in rows if isinstance(r, Artifact)]
    problems = []
    for r in runs:
        if not Path(r.model_path).is_file():
            problems.append(f"run {r.run_id}: its model {r.model_path} is gone")
        elif sha256_file(r.model_path) != r.sha256:
            problems.append(f"run {r.run_id}: its model's hash differs from the row")
    recorded = {Path(r.model_path).resolve().parent for r in runs}
    for folder in Path(ws.artifacts_dir).iterdir() if Path(ws.artifacts_dir).is_dir() else []:
        if folder.resolve() not in recorded:
            problems.append(f"folder {folder.name} is in no history row ({sorted(p.name for p in folder.iterdir())})")
    problems += [f"interrupted: {r}" for r in run_recovery.interrupted_runs(ws)]
    problems += [f"adopted at the next start: {n}" for n in run_recovery.startup(ws)]
    if len(ws.history().list()) != len(rows):
        problems.append(f"the next start changed the history: {len(rows)} → {len(ws.history().list())} rows")
    by_origin: dict[str, int] = {}
    for r in runs:
        by_origin[r.origin or "?"] = by_origin.get(r.origin or "?", 0) + 1
    return problems, by_origin


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-s", type=float, default=3.0, help="the time limit of the limited jobs (s)")
    parser.add_argument("--soak-s", type=float, default=300.0, help="bound on the whole soak (s)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary home (its path is printed)")
    args = parser.parse_args()
    if why := browser_missing():
        print(f"soak_stop: {why}", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="ortlab_soak_"))
    home, limited_home, out = tmp / "home", tmp / "home_limited", tmp / "cli"
    home.mkdir()
    limited_home.symlink_to(home, target_is_directory=True)
    out.mkdir()
    os.environ.setdefault("ORTLAB_CACHE_DIR", str(tmp / "ortlab_cache"))
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(ORTLAB_HOME=str(home), PYTHONUNBUFFERED="1")
    env.pop(service.RUN_TIMEOUT_VAR, None)
    began = time.monotonic()
    load_before = os.getloadavg()
    actors = [Actor("browser A"), Actor("browser B"), Actor("CLI")]
    dl = Deadline(args.soak_s)
    with start_app(home) as main_app:
        os.environ[service.RUN_TIMEOUT_VAR] = f"{args.limit_s:g}"
        try:
            limited_ctx = start_app(limited_home)
            limited_app = limited_ctx.__enter__()
        finally:
            del os.environ[service.RUN_TIMEOUT_VAR]
        try:
            sampler = RssSampler({"server": server_pid(main_app["url"]),
                                  "limited server": server_pid(limited_app["url"])})
            sampler.start()
            threads = [threading.Thread(target=browser_actor, args=(a, main_app["url"], limited_app["url"], dl))
                       for a in actors[:2]]
            threads.append(threading.Thread(target=cli_actor, args=(actors[2], env, out, args.limit_s, dl)))
            for t in threads:
                t.start()
            for t in threads:
                t.join(max(1.0, dl.end - time.monotonic() + 60))
            stuck = [a.name for a, t in zip(actors, threads) if t.is_alive()]
            time.sleep(2)
            sampler.stop.set()
            sampler.join()
        finally:
            limited_ctx.__exit__(None, None, None)
    soak_s = time.monotonic() - began
    time.sleep(STOP_GRACE_S)  # a stopped group gets this grace before SIGKILL
    left = our_processes([str(home), str(limited_home)])
    problems, by_origin = check_history(home)
    runs = sum(by_origin.values())
    done = {what: sum(1 for a in actors for w, outcome, _ in a.jobs if w == what and not outcome.startswith("FAILED"))
            for what in ("demo", "optimize", "tune")}
    expected = {"app": done["demo"], "cli": done["optimize"], "tune": done["tune"]}  # a tune: at least one trial
    for origin, want in expected.items():
        have = by_origin.get(origin, 0)
        if have < want or (origin != "tune" and have != want):
            problems.append(f"{origin}: {have} runs recorded, {want} expected")
    jobs = sum(len(a.jobs) for a in actors)
    failures = [f"{a.name}: {f}" for a in actors for f in a.failures] + [f"{n}: still running" for n in stuck]
    history = subprocess.run([sys.executable, "-m", "ortlab", "history", "--json"], cwd=REPO, env=env,
                             capture_output=True, text=True)
    listed = json.loads(history.stdout) if history.returncode == 0 else {}
    print("\n=== soak of stops (issue 26) ===")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"load before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} (1-min averages)")
    for a in actors:
        print(f"{a.name}: {len(a.jobs)} jobs, {a.cancels} cancel, {a.limits} time limit")
        for what, outcome, took in a.jobs:
            print(f"    {what:32} {took:6.0f} s  {outcome}")
    print(f"actors {len(actors)}, jobs {jobs}, cancels {sum(a.cancels for a in actors)}, "
          f"time limits {sum(a.limits for a in actors)} ({args.limit_s:g} s)")
    print(f"runs recorded {runs} by origin {by_origin}; expected {expected} (tune: at least one trial each); "
          f"`ortlab history --json`: {len(listed.get('runs', []))} runs, {len(listed.get('benchmarks', []))} "
          f"benchmarks; runs lost or inconsistent: {len(problems)}")
    for p in problems:
        print(f"    {p}")
    print(f"orphan processes: {len(left)}")
    for pid, args_ in left:
        print(f"    {pid} {args_}")
    print(f"server RSS start / peak / end: {sampler.summary()}")
    print(f"wall time {soak_s:.0f} s (bound {args.soak_s:.0f} s); step failures {len(failures)}")
    for f in failures:
        print(f"    {f}")
    if args.keep:
        print(f"home kept: {home}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if problems or left or failures else 0


if __name__ == "__main__":
    sys.exit(main())
