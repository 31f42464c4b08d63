#!/usr/bin/env bash
# plot.sh — draw forward_loop traces: reserved device memory per iteration, one
# line per policy, and each policy's GC time split into exposed (on the host's
# critical path) and hidden (overlapping device work), to one PNG (gnuplot).
#
# Usage:
#   bench/plot.sh [-o OUT.png] [-d DIR] [-t TITLE] [-L] [-p POLICIES] FORWARD_LOOP [-- ARGS...]
#       runs FORWARD_LOOP (the examples/forward_loop binary) once per policy with
#       --trace DIR/<policy>.csv --json --quiet plus ARGS, then plots the traces.
#       DIR keeps the CSVs and each run's JSON (default: a new directory under /tmp).
#   bench/plot.sh [-o OUT.png] [-t TITLE] [-L] TRACE.csv...
#       plots existing traces; a trace's policy is its file name without .csv
#       (and without a "trace-" or "forward-" prefix), e.g. at_limit.csv. When a
#       run's JSON lies next to its trace (at_limit.json), the hard limit is drawn.
#
# Options:
#   -o OUT.png   output file (default forward_loop.png)
#   -d DIR       where runs write their CSV and JSON files
#   -t TITLE     title of the memory plot (default: says what was run)
#   -L           linear memory axis (default logarithmic: the oracle's few MiB and
#                at_limit's hundreds both stay readable)
#   -p LIST      comma-separated policies to run (default explicit_free,cudajl,pressure:
#                the oracle, the CUDA.jl baseline and ours, as in the README picture)
#
# Examples:
#   bench/plot.sh build/examples/forward_loop -- --backend host --host-heap-mib 256 --iters 1000
#   bench/plot.sh -o h200.png build/examples/forward_loop -- --iters 20000 --host-heap-mib 1024
#   bench/plot.sh -o mine.png traces/pressure.csv traces/at_limit.csv
#
# The trace format (forward_loop --trace): a header line, then
#   iteration,live,reserved,collections,gc_seconds,exposed_gc_seconds,hidden_gc_seconds
# with bytes for live/reserved and cumulative collections and GC seconds
# (exposed includes the runtime's own collections). Older traces without the
# last two columns are drawn with all their GC time as exposed.
# Needs gnuplot (Debian: apt-get install gnuplot-nox) and awk.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

out=forward_loop.png
dir=
title=
logscale=1
policies=explicit_free,cudajl,pressure
while getopts "o:d:t:Lp:h" opt; do
  case $opt in
    o) out=$OPTARG ;;
    d) dir=$OPTARG ;;
    t) title=$OPTARG ;;
    L) logscale=0 ;;
    p) policies=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { usage >&2; exit 2; }

if ! command -v gnuplot >/dev/null 2>&1; then
  echo "plot.sh: gnuplot not found; install it (Debian: apt-get install gnuplot-nox)" >&2
  exit 1
fi

csvs=()
names=()
run_args=""
hard_limit=""   # bytes; known when this script ran the loop (drawn as a line)
if [[ "$1" != *.csv ]]; then
  # Run the binary once per policy.
  bin=$1
  shift
  [ -x "$bin" ] || { echo "plot.sh: '$bin' is not an executable (and not a .csv trace)" >&2; exit 2; }
  if [ $# -gt 0 ] && [ "$1" = "--" ]; then shift; fi
  run_args="$*"
  [ -n "$dir" ] || dir=$(mktemp -d /tmp/forward_loop_traces.XXXXXX)
  mkdir -p "$dir"
  IFS=, read -r -a plist <<<"$policies"
  for p in "${plist[@]}"; do
    echo "plot.sh: running $p ..." >&2
    if ! "$bin" --policy "$p" --trace "$dir/$p.csv" --json --quiet "$@" >"$dir/$p.out"; then
      echo "plot.sh: forward_loop --policy $p failed; see $dir/$p.out" >&2
      exit 1
    fi
    tail -n 1 "$dir/$p.out" >"$dir/$p.json"
    csvs+=("$dir/$p.csv")
    names+=("$p")
  done
  echo "plot.sh: traces and JSON results in $dir" >&2
  hard_limit=$(grep -o '"hard_limit":[0-9]*' "$dir/${plist[0]}.json" | head -n 1 | cut -d: -f2 || true)
else
  # Known policies first, in the usual order, then any others as given. The
  # names here (and in color_of/width_of/draw_rank) only order and style the
  # plot: gcpressure::policy_names() defines them, and a name unknown here
  # gets the default rank and style.
  rank() {
    case $1 in
      pressure) echo 0 ;; at_limit) echo 1 ;; every_iteration) echo 2 ;; cudajl) echo 3 ;;
      dotnet) echo 4 ;; explicit_free) echo 5 ;; *) echo 9 ;;
    esac
  }
  i=0
  while IFS=$'\t' read -r _ _ b f; do
    csvs+=("$f")
    names+=("$b")
  done < <(for f in "$@"; do
             [ -r "$f" ] || { echo "plot.sh: cannot read '$f'" >&2; exit 2; }
             b=$(basename "$f" .csv)
             b=${b#trace-}
             b=${b#forward-}
             printf '%s\t%05d\t%s\t%s\n' "$(rank "$b")" "$((i++))" "$b" "$f"
           done | sort)
  [ ${#csvs[@]} -eq $# ] || exit 2
  # A run's JSON next to its trace (as this script leaves them) gives the hard limit.
  for f in "${csvs[@]}"; do
    if [ -r "${f%.csv}.json" ]; then
      hard_limit=$(grep -o '"hard_limit":[0-9]*' "${f%.csv}.json" | head -n 1 | cut -d: -f2 || true)
      break
    fi
  done
fi

tmp=$(mktemp -d /tmp/plot_sh.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# GC time per policy (the last row's cumulative figures): name, exposed,
# hidden, collections, iterations.
bars=$tmp/bars.dat
: >"$bars"
for i in "${!csvs[@]}"; do
  awk -F, -v name="${names[$i]}" 'NR > 1 && NF >= 5 { e = (NF >= 7 ? $6 : $5); h = (NF >= 7 ? $7 : 0); c = $4; n = $1 }
    END { if (n == "") { e = 0; h = 0; c = 0; n = 0 } printf "%s %.6f %.6f %d %d\n", name, e, h, c, n }' \
    "${csvs[$i]}" >>"$bars"
done
# Longest trace, and the smallest reserved value (the log axis starts below it).
maxit=$(awk '$5 > m { m = $5 } END { print m + 0 }' "$bars")
maxres=$(awk -F, 'FNR > 1 && NF >= 5 && $3 > m { m = $3 } END { print m + 1 }' "${csvs[@]}")
minres=$(awk -F, 'FNR > 1 && NF >= 5 && $3 > 0 && (m == "" || $3 < m) { m = $3 } END { print (m == "" ? 1048576 : m) }' "${csvs[@]}")

color_of() {
  case $1 in
    pressure) echo "#1a9641" ;;
    at_limit) echo "#d7191c" ;;
    every_iteration) echo "#2b83ba" ;;
    cudajl) echo "#fdae61" ;;
    dotnet) echo "#7b3294" ;;
    explicit_free) echo "#555555" ;;
    *) echo "#000000" ;;
  esac
}
# Lines can coincide (every baseline grows alike until it first collects): the
# memory plot draws the widest first and ours last, so that each stays visible.
width_of() {
  case $1 in at_limit) echo 6 ;; dotnet) echo 4.5 ;; cudajl) echo 3 ;; pressure) echo 2.5 ;; *) echo 2 ;; esac
}
draw_rank() {
  case $1 in at_limit) echo 0 ;; dotnet) echo 1 ;; cudajl) echo 2 ;; every_iteration) echo 3 ;;
    explicit_free) echo 4 ;; pressure) echo 9 ;; *) echo 5 ;; esac
}
dash_of() { [ "$1" = explicit_free ] && echo "dt 2" || echo "dt 1"; }

if [ -z "$title" ]; then
  title="Reserved device memory per iteration"
  [ -n "$run_args" ] && title="$title (forward_loop $run_args)"
fi
# gnuplot strings: escape backslashes and double quotes.
gp_str() { printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g'; }

script=$tmp/plot.gp
{
  echo "set terminal pngcairo size 1400,1000 font 'DejaVu Sans,11' noenhanced"
  echo "set output \"$(gp_str "$out")\""
  echo "set datafile separator ','"
  echo "set multiplot layout 2,1 margins 0.07,0.82,0.07,0.94 spacing 0,0.1"
  echo "set title \"$(gp_str "$title")\""
  echo "set xlabel 'iteration'"
  echo "set ylabel 'reserved (MiB)'"
  echo "set grid"
  echo "set key outside right top"
  echo "set xrange [0:$maxit]"
  if [ "$logscale" = 1 ]; then
    echo "set logscale y 2"
    echo "set format y '%g'"
    top=$maxres
    [ -n "$hard_limit" ] && [ "$hard_limit" -gt "$top" ] && top=$hard_limit
    echo "set yrange [$minres/1048576.0/1.5:$top/1048576.0*1.6]"
  else
    top=$maxres
    [ -n "$hard_limit" ] && [ "$hard_limit" -gt "$top" ] && top=$hard_limit
    echo "set yrange [0:$top/1048576.0*1.1]"
  fi
  printf 'plot '
  first=1
  for i in $(for j in "${!csvs[@]}"; do echo "$(draw_rank "${names[$j]}") $j"; done | sort -n -k1,1 -k2,2 | cut -d' ' -f2); do
    n=${names[$i]}
    [ "$first" = 1 ] || printf ', \\\n     '
    first=0
    its=$(awk -v n="$n" '$1 == n { print $5 }' "$bars")
    label=$n
    [ "$its" -lt "$maxit" ] && label="$n (stopped at $its)"
    printf '"%s" every ::1 using 1:($3/1048576.0) with lines lw %s %s lc rgb "%s" title "%s"' \
      "$(gp_str "${csvs[$i]}")" "$(width_of "$n")" "$(dash_of "$n")" "$(color_of "$n")" "$(gp_str "$label")"
  done
  if [ -n "$hard_limit" ]; then
    printf ', \\\n     %s/1048576.0 with lines lw 1 dt 3 lc rgb "#000000" title "hard limit"' "$hard_limit"
  fi
  echo
  echo "unset logscale y"
  echo "unset format"
  echo "set datafile separator whitespace"
  echo "set title 'GC time: exposed (solid) and hidden under device work (light); labels: exposed / hidden s, policy collections / iterations'"
  echo "set xlabel ''"
  echo "set ylabel 'GC time (s)'"
  echo "set style fill solid 0.85 border -1"
  echo "set boxwidth 0.6"
  echo "set yrange [0:*]"
  echo "set xrange [-0.6:$(( ${#csvs[@]} - 1 )).6]"
  echo "unset key"
  echo "set offsets 0,0,graph 0.12,0"
  printf 'plot "%s" using 0:($2+$3):(column(0)+1):xtic(1) with boxes fs transparent solid 0.3 lc variable, \\\n' \
    "$(gp_str "$bars")"
  printf '     "" using 0:2:(column(0)+1) with boxes lc variable, \\\n'
  printf '     "" using 0:($2+$3):(sprintf("%%.3f / %%.3f s\\n%%d / %%d", $2, $3, $4, $5)) with labels offset 0,1.6 notitle\n'
  echo "unset multiplot"
} >"$script"

# Bar colours: "lc variable" picks line types 1..n; make them the line colours.
for i in "${!csvs[@]}"; do
  echo "set linetype $((i + 1)) lc rgb \"$(color_of "${names[$i]}")\""
done >"$tmp/all.gp"
cat "$script" >>"$tmp/all.gp"
gnuplot "$tmp/all.gp"
echo "plot.sh: wrote $out" >&2
