"""Record the README tour in an 80-column tmux pane: docs/tour.txt.

Each command between the README's "<!-- tour -->" markers (one per line, the `mlsys ...` part of a
line inside the fenced block, comments dropped) runs in a fresh tmux session 80 columns wide, as a
user's terminal would show it (rich sees a terminal of that width); the pane's whole history is
captured as text. Run from the repository root with `mlsys` on PATH:

    python scripts/record_tour.py            # writes docs/tour.txt
    python scripts/record_tour.py --check    # exit 1 if a command fails or a line passes 80 columns
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 80


def tour_commands(readme: Path) -> list[str]:
    """The `mlsys` commands of the README's tour block, in order, without their comments."""
    text = readme.read_text()
    match = re.search(r"<!-- tour -->\s*```bash\n(.*?)```", text, re.S)
    if not match:
        raise SystemExit("README.md has no '<!-- tour -->' block")
    commands = []
    for line in match.group(1).splitlines():
        command = line.split("  #", 1)[0].strip()
        if command.startswith("mlsys ") and "./my-model" not in command:
            commands.append(command)
    return commands


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def record(command: str, workdir: Path) -> tuple[str, int]:
    """Run one command in an 80-column pane; return what the pane shows and the exit code."""
    session = "mlsys-tour"
    status = workdir / "rc"
    # the pane runs the command itself (no prompt, no echoed keys) and stays open while it is read
    shell = (f"cd {shlex.quote(str(workdir))} && {command}; echo $? > {status}; "
             "tmux wait-for -S mlsys-tour-done; sleep 30")
    _tmux("new-session", "-d", "-s", session, "-x", str(WIDTH), "-y", "50",
          "-e", "TERM=xterm-256color", "bash", "--norc", "--noprofile", "-c", shell)
    _tmux("set-option", "-t", session, "history-limit", "20000")
    subprocess.run(["tmux", "wait-for", "mlsys-tour-done"], check=True, timeout=300)
    pane = _tmux("capture-pane", "-p", "-t", session, "-S", "-", "-E", "-")
    _tmux("kill-session", "-t", session)
    body = [line.rstrip() for line in pane.splitlines()]
    while body and not body[-1]:
        body.pop()
    return "\n".join(body), int(status.read_text().strip() or 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check: every command exits 0 within 80 columns")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "tour.txt")
    args = parser.parse_args()
    if not shutil.which("tmux") or not shutil.which("mlsys"):
        raise SystemExit("needs tmux and mlsys on PATH")
    failures = []
    parts = [f"# The README tour in an 80-column terminal (tmux {_tmux('-V').split()[-1]}), "
             "written by scripts/record_tour.py", ""]
    with tempfile.TemporaryDirectory() as tmp:
        for command in tour_commands(ROOT / "README.md"):
            try:
                shown, code = record(command, Path(tmp))
            except subprocess.CalledProcessError as error:
                shown, code = f"(not recorded: {' '.join(error.cmd[:2])} failed)", 1
                subprocess.run(["tmux", "kill-server"], capture_output=True)
            wide = [line for line in shown.splitlines() if len(line) > WIDTH]
            if code != 0 or wide:
                failures.append(f"{command}: exit {code}, {len(wide)} lines over {WIDTH} columns")
            parts += [f"$ {command}", shown, ""]
    if not args.check:
        args.out.write_text("\n".join(parts))
        print(f"wrote {args.out.relative_to(ROOT)}", file=sys.stderr)
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
