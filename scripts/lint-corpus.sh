#!/usr/bin/env bash
# `cargo vramguard lint` on the corpus crates (those of scripts/corpus-check.sh), default
# targets and --all-targets, checked against the classification in docs/lints-corpus.tsv.
# Prints one line per crate, e.g.
#
#   lint candle-nn 0.11.1: 0 findings in 454 functions; --all-targets: 0 findings in 594 functions
#
# then every finding with its verdict, and the totals:
#
#   lint corpus: default targets 1 finding (0 true, 1 false); --all-targets 3 findings (1 true, 2 false)
#
# Exits non-zero when a finding is not classified in docs/lints-corpus.tsv, or a classified one
# no longer appears (the rules changed: classify again). Needs the crates' sources: fetched by
# cargo into its registry (crates.io, or a warm cache with CORPUS_OFFLINE=1). CORPUS_TOOL: a
# cargo-vramguard binary already built, else a release build of it. Takes seconds once the
# sources are there.
set -uo pipefail
cd "$(dirname "$0")/.."
VERDICTS=docs/lints-corpus.tsv
if [[ -n "${CORPUS_TOOL:-}" ]]; then
    TOOL=$CORPUS_TOOL
else
    cargo build --release -q -p cargo-vramguard || { echo "lint corpus: FATAL: cargo-vramguard does not build" >&2; exit 1; }
    TOOL=target/release/cargo-vramguard
fi
OFFLINE=()
if [[ "${CORPUS_OFFLINE:-0}" == 1 ]]; then OFFLINE=(--offline); fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

failed=0
declare -A total true_count false_count
for targets in default all; do total[$targets]=0; true_count[$targets]=0; false_count[$targets]=0; done
seen=()

# lint NAME VERSION TARGETS: runs the tool, prints "N findings in M functions", records findings
lint() {
    local name=$1 version=$2 targets=$3 args=()
    [[ $targets == all ]] && args+=(--all-targets)
    if ! "$TOOL" vramguard lint "$name@$version" --message-format short "${args[@]}" "${OFFLINE[@]}" \
        > "$out/$name-$targets.txt" 2> "$out/$name-$targets.err"; then
        echo "lint corpus: ERROR on $name@$version: $(tail -n 3 "$out/$name-$targets.err")" >&2
        failed=1
        return
    fi
    sed -n 's/^vramguard lint: \([0-9]* findings\{0,1\}\) in \([0-9]*\) functions.*/\1 in \2 functions/p' \
        "$out/$name-$targets.err" | tail -n 1
}

for spec in candle-nn@0.11.1 dfdx@0.13.0 moshi@0.6.4 rten@0.27.0 linfa-clustering@0.8.1 \
    burn-core@0.22.1 smartcore@0.7.0; do
    name=${spec%@*} version=${spec#*@}
    default=$(lint "$name" "$version" default)
    all=$(lint "$name" "$version" all)
    echo "lint $name $version: ${default:-?}; --all-targets: ${all:-?}"
    for targets in default all; do
        [[ -f "$out/$name-$targets.txt" ]] || continue
        while IFS= read -r line; do
            location=$(cut -d: -f1,2 <<< "$line")
            lint_name=$(sed -n 's/.*warning\[vramguard::\([a-z_]*\)\].*/\1/p' <<< "$line")
            [[ -n $lint_name ]] || continue
            total[$targets]=$((total[$targets] + 1))
            # A finding of the default targets is classified once, under `default`; one that only
            # --all-targets shows, under `all`.
            verdict=$(awk -F'\t' -v c="$name $version" -v l="$location" -v n="$lint_name" \
                '$1 == c && $3 == l && $4 == n { print $5 "\t" $2; exit }' "$VERDICTS")
            if [[ -z $verdict ]]; then
                echo "  UNCLASSIFIED ($targets) $name $version $location $lint_name: $line"
                failed=1
                continue
            fi
            seen+=("$name $version|$location|$lint_name")
            case ${verdict%%$'\t'*} in
                true) true_count[$targets]=$((true_count[$targets] + 1)) ;;
                *) false_count[$targets]=$((false_count[$targets] + 1)) ;;
            esac
            [[ $targets == all && ${verdict#*$'\t'} == default ]] && continue
            echo "  ${verdict%%$'\t'*} ($targets) $name $version $location $lint_name"
        done < "$out/$name-$targets.txt"
    done
done

# Every classified finding must still appear.
while IFS=$'\t' read -r crate _ location lint_name _; do
    [[ -z $crate || $crate == \#* ]] && continue
    key="$crate|$location|$lint_name"
    if ! printf '%s\n' "${seen[@]}" | grep -qxF "$key"; then
        echo "  GONE $crate $location $lint_name: classified in $VERDICTS, no longer found"
        failed=1
    fi
done < "$VERDICTS"

plural() { [[ $1 -eq 1 ]] && echo "$1 finding" || echo "$1 findings"; }
echo "lint corpus: default targets $(plural "${total[default]}") (${true_count[default]} true, ${false_count[default]} false);" \
    "--all-targets $(plural "${total[all]}") (${true_count[all]} true, ${false_count[all]} false)"
if [[ $failed -ne 0 ]]; then
    echo "lint corpus: FAILED: classify the findings in $VERDICTS (or fix the rule)" >&2
    exit 1
fi
