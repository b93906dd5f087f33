#!/usr/bin/env python3
"""Counts the tests and test binaries of a `cargo test --workspace` log.

    cargo test --workspace 2>&1 | scripts/count-tests.py
    scripts/count-tests.py LOG

Prints one line per binary (unit tests, integration tests, doc tests: what ran, passed,
failed, ignored), then the totals: integration test targets (`Running tests/...`, the
`harness = false` ones included), all binaries, and the tests passed. A `harness = false`
binary prints its own summary (`N passed, M failed`); a line without one counts as 1 test.
"""
import re
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*m")
RUNNING = re.compile(r"^\s+(Running|Doc-tests)\s+(unittests \S+|\S+)(?:\s+\((\S+)\))?")
LIBTEST = re.compile(r"^test result: (\w+)\. (\d+) passed; (\d+) failed; (\d+) ignored")
CUSTOM = re.compile(r"^(\d+) passed, (\d+) failed")


def main() -> int:
    text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
    binaries = []  # [kind, name, passed, failed, ignored, summarised]
    for raw in text.splitlines():
        line = ANSI.sub("", raw)
        m = RUNNING.match(line)
        if m:
            kind, name, path = m.groups()
            label = name if kind == "Doc-tests" else f"{name} ({(path or '').split('/')[-1]})"
            binaries.append([kind, label, 0, 0, 0, False])
            continue
        if not binaries:
            continue
        current = binaries[-1]
        m = LIBTEST.match(line)
        if m and not current[5]:
            current[2:6] = [int(m.group(2)), int(m.group(3)), int(m.group(4)), True]
            continue
        m = CUSTOM.match(line)
        if m and not current[5]:
            current[2:6] = [int(m.group(1)), int(m.group(2)), 0, True]
    for kind, label, passed, failed, ignored, summarised in binaries:
        note = "" if summarised else "  (no summary line: counted as 1 test)"
        if not summarised:
            passed = 1
        print(f"{passed:5} passed {failed:3} failed {ignored:3} ignored  {kind:9} {label}{note}")
    passed = sum(b[2] if b[5] else 1 for b in binaries)
    failed = sum(b[3] for b in binaries)
    ignored = sum(b[4] for b in binaries)
    integration = [b for b in binaries if b[0] == "Running" and b[1].startswith("tests/")]
    print(f"integration test binaries: {len(integration)}")
    print(f"binaries run (unit, integration, doc tests): {len(binaries)}")
    print(f"tests: {passed} passed, {failed} failed, {ignored} ignored")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
