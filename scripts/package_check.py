"""Helpers of scripts/package-check.sh, one subcommand each:

  order                  the workspace's publishable packages (`cargo metadata` on stdin), one
                         per line, each after the workspace packages it depends on
  add CRATE REGISTRY     unpacks a .crate into a directory source, with the
                         .cargo-checksum.json cargo checks (each file's sha256, and the
                         .crate's as the package's)
  readme-lines README    the README's two dependency lines, read from its ```toml blocks:
                         `default<TAB>LINE` and `candle<TAB>LINE`
  compare JSON A P       checks that measure's peak_ratio (in the JSON file) is within 0.01 of
                         A / P, the peaks measured by hand; prints both
"""
import hashlib
import json
import os
import sys
import tarfile


def order():
    metadata = json.load(sys.stdin)
    members = set(metadata["workspace_members"])
    # `publish = false` is `[]`; no `publish` key is `null` (any registry).
    packages = {
        p["name"]: p
        for p in metadata["packages"]
        if p["id"] in members and p["publish"] != []
    }
    after = {}
    for name, package in packages.items():
        deps = set()
        for dep in package["dependencies"]:
            if dep.get("path") is None or dep["name"] not in packages:
                continue
            if dep["kind"] == "dev" and not dep.get("req", "*").strip("*"):
                continue  # a dev-dependency without a version is left out of the package
            deps.add(dep["name"])
        after[name] = deps
    done = []
    while len(done) < len(after):
        ready = sorted(n for n, deps in after.items() if n not in done and deps <= set(done))
        if not ready:
            left = sorted(set(after) - set(done))
            sys.exit(f"package-check: the workspace packages {left} depend on each other in a cycle")
        done.extend(ready)
    print("\n".join(done))


def add(crate, registry):
    with open(crate, "rb") as f:
        package_sum = hashlib.sha256(f.read()).hexdigest()
    with tarfile.open(crate) as tar:
        top = tar.getnames()[0].split("/")[0]
        dest = os.path.join(registry, top)
        if os.path.exists(dest):
            sys.exit(f"package-check: {dest} is in the registry already")
        tar.extractall(registry, filter="data")
    files = {}
    for dirpath, _, names in os.walk(dest):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, dest)] = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(dest, ".cargo-checksum.json"), "w") as f:
        json.dump({"files": files, "package": package_sum}, f)
    print(dest)


def readme_lines(readme):
    lines = []
    in_toml = False
    for line in open(readme, encoding="utf-8"):
        stripped = line.strip()
        if stripped.startswith("```"):
            in_toml = stripped == "```toml"
            continue
        if in_toml and stripped.startswith("vramguard ="):
            lines.append(stripped)
    default = [l for l in lines if "features" not in l]
    candle = [l for l in lines if '"candle"' in l]
    if len(default) != 1 or len(candle) != 1:
        sys.exit(
            "package-check: README.md's ```toml blocks must hold one `vramguard = ...` line "
            f"without features and one with the candle feature; found {lines}"
        )
    print(f"default\t{default[0]}")
    print(f"candle\t{candle[0]}")


def compare(path, annotated, plain):
    report = json.load(open(path))
    by_hand = int(annotated) / int(plain)
    measured = report["peak_ratio"]
    print(
        f"peak ratio: measure {measured:.4f} ({report['annotated_peak_bytes']} / "
        f"{report['plain_peak_bytes']} B), by hand {by_hand:.4f} ({annotated} / {plain} B)"
    )
    if abs(measured - by_hand) > 0.01:
        sys.exit("package-check: measure's peak_ratio is not within 0.01 of the hand measurement")
    for key in ["plain_peak_bytes", "annotated_peak_bytes", "peak_ratio", "stdout_identical", "time_ratio"]:
        if key not in report:
            sys.exit(f"package-check: measure --json has no `{key}`")
    if report["stdout_identical"] is not True:
        sys.exit("package-check: the annotated program printed something else")


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    {"order": order, "add": add, "readme-lines": readme_lines, "compare": compare}[command](*args)
