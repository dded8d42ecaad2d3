#!/usr/bin/env python3
"""Run the tutorials as tests: every ```sh block of every tutorials/*.md.

Conventions (a tutorial is read by people first, so they are light):

  * A fenced block whose info string starts with `sh` is executed. Blocks
    run in order, each in a fresh `sh -e` (so a failing command fails the
    block), all in one temporary folder per tutorial: files persist from
    block to block, shell variables and `cd` do not.
  * The temporary folder starts as a copy of tutorials/<name>/ when that
    folder exists (for tutorials that ship files), else empty; most
    tutorials create their files themselves (`cat > first.tpk <<'EOF'`).
  * `tpk` is build/tpk (the build folder given on the command line comes
    first on PATH), and `import tpk` this tree's python/ package; $TPK_ROOT
    is the repository. LC_ALL=C keeps system messages stable.
  * The next fenced block after an ```sh block, if it is a ```text block,
    holds the expected output: stdout and stderr together, compared after
    stripping trailing whitespace from each line and trailing blank lines.
    Use ```text for nothing else in a tutorial.
  * A block must exit with status 0, unless its info string says otherwise:
    ```sh exit=1  (a block that shows an error). ```sh skip is not run.

    python3 tools/run_tutorials.py BUILD [--only NAME] [--fill] [-v]

--fill writes the actual output under each ```sh block that has none yet
(review the diff before committing). Prints one line per tutorial and
`tutorials: N passed, M failed`; exits 1 when any failed.
"""
import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK_TIMEOUT = 120  # seconds

FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})\s*([^`]*)$")


class Block:
    def __init__(self, lang, attrs, body, start, end):
        self.lang = lang      # first word of the info string
        self.attrs = attrs    # the other words, key=value or flags
        self.body = body      # text between the fences
        self.start = start    # 1-based line of the opening fence
        self.end = end        # 1-based line of the closing fence
        self.expected = None  # the ```text Block after an sh block


def parse_blocks(text):
    """Fenced code blocks of a Markdown text, in order."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).split()
        body, j = [], i + 1
        while j < len(lines):
            close = lines[j].strip()
            if close.startswith(fence[0] * len(fence)) and set(close) == {fence[0]}:
                break
            line = lines[j]
            body.append(line[indent:] if line[:indent].strip() == "" else line)
            j += 1
        lang = info[0] if info else ""
        blocks.append(Block(lang, info[1:], "\n".join(body) + "\n", i + 1, j + 1))
        i = j + 1
    # Pair each sh block with the text block that follows it.
    for a, b in zip(blocks, blocks[1:]):
        if a.lang == "sh" and b.lang == "text":
            a.expected = b
    return blocks


def attr(block, key, default=None):
    for a in block.attrs:
        if a == key:
            return True
        if a.startswith(key + "="):
            return a.split("=", 1)[1]
    return default


def normalise(text):
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines)


def run_block(block, cwd, env):
    try:
        p = subprocess.run(["sh", "-e", "-c", block.body], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=BLOCK_TIMEOUT)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode("utf-8", "replace")
        return None, out + f"\n[timed out after {BLOCK_TIMEOUT} s]\n"


def run_tutorial(path, build, fill, verbose):
    """Returns (passed, number of blocks run, fills to apply)."""
    name = os.path.basename(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    blocks = [b for b in parse_blocks(text) if b.lang == "sh"]
    env = dict(os.environ)
    env["PATH"] = os.path.abspath(build) + os.pathsep + env.get("PATH", "")
    env["TPK_ROOT"] = ROOT
    # `import tpk` finds this tree's package, as `tpk` finds this build
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["LC_ALL"] = "C"
    env.pop("CDPATH", None)
    tmp = tempfile.mkdtemp(prefix="tpk-tutorial-")
    try:
        return run_blocks(name, blocks, tmp, path, env, fill, verbose)
    finally:
        remove_settled(tmp)


def remove_settled(folder):
    """Remove folder, waiting a little for what still writes into it: a
    block's process that ended with a background cc build under way leaves
    the compiler to finish its files in the cache's build folder."""
    for _ in range(40):
        try:
            shutil.rmtree(folder)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.25)
    shutil.rmtree(folder, ignore_errors=True)


def run_blocks(name, blocks, tmp, path, env, fill, verbose):
    """Run a tutorial's blocks in folder tmp; (ok, blocks run, fills)."""
    ok, ran, fills = True, 0, []
    work = os.path.join(tmp, "work")
    # A fresh cache per tutorial: what the reader's earlier `tpk tune`
    # runs remember must not change the output shown.
    env["TPK_CACHE_DIR"] = os.path.join(tmp, "cache")
    shipped = os.path.splitext(path)[0]
    if os.path.isdir(shipped):
        shutil.copytree(shipped, work)
    else:
        os.mkdir(work)
    for b in blocks:
        if attr(b, "skip"):
            continue
        ran += 1
        want_status = int(attr(b, "exit", "0"))
        status, out = run_block(b, work, env)
        problems = []
        if status != want_status:
            problems.append(f"exit status {status}, expected {want_status}")
        if b.expected is not None:
            want, got = normalise(b.expected.body), normalise(out)
            if want != got:
                diff = difflib.unified_diff(want.split("\n"), got.split("\n"), "expected", "actual", lineterm="")
                problems.append("output differs:\n" + "\n".join(diff))
        elif fill and status == want_status and normalise(out):
            fills.append((b.end, normalise(out)))
        if verbose:
            print(f"--- {name}:{b.start} (exit {status})\n{b.body.rstrip()}\n>>>\n{out.rstrip()}")
        if problems:
            ok = False
            print(f"{name}:{b.start}: block failed: " + "; ".join(p.split("\n")[0] for p in problems))
            print("  " + b.body.rstrip().replace("\n", "\n  "))
            for p in problems:
                if "\n" in p:
                    print("  " + p.split("\n", 1)[1].replace("\n", "\n  "))
            if status != want_status and b.expected is None:
                print("  output:\n    " + (out.rstrip() or "(none)").replace("\n", "\n    "))
    return ok, ran, fills


def apply_fills(path, fills):
    """Insert ```text blocks after the given closing-fence lines."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for end, out in sorted(fills, reverse=True):
        lines[end:end] = ["", "```text"] + out.split("\n") + ["```"]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description="Run the tutorials' shell blocks and compare their output.")
    ap.add_argument("build", nargs="?", default="build", help="build folder holding tpk (default: build)")
    ap.add_argument("--only", help="run only tutorials whose file name contains this")
    ap.add_argument("--fill", action="store_true", help="write missing expected outputs into the tutorials")
    ap.add_argument("-v", "--verbose", action="store_true", help="show every block and its output")
    args = ap.parse_args()

    tpk = os.path.join(args.build, "tpk")
    if not os.access(tpk, os.X_OK):
        print(f"tutorials: {tpk} does not exist; build it first (make)")
        print("tutorials: 0 passed, 1 failed")
        return 1
    folder = os.path.join(ROOT, "tutorials")
    paths = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".md")) \
        if os.path.isdir(folder) else []
    paths = [p for p in paths if not args.only or args.only in os.path.basename(p)]
    passed = failed = 0
    for p in paths:
        ok, ran, fills = run_tutorial(p, args.build, args.fill, args.verbose)
        print(f"{os.path.basename(p)}: {'ok' if ok else 'FAILED'} ({ran} blocks)")
        if fills:
            apply_fills(p, fills)
            print(f"{os.path.basename(p)}: wrote {len(fills)} expected outputs; review with git diff")
        passed += ok
        failed += not ok
    print(f"tutorials: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
