#!/usr/bin/env bash
# Offload benchmarks as ratios measured in the same run (builds nothing):
#   (a) host Adam bytes/s over STREAM triad bytes/s, both from `zerolens calibrate` (target >= 0.8);
#   (b) NvmeStore write (a new file) and read bandwidth (zerolens calibrate --nvme-path) over fio's
#       with direct I/O, the same block size, queue depth, size and directory (target >= 0.8); and,
#       for information, NvmeStore overwriting its previous version (what the engine does per step).
# Each round runs calibrate then fio right after; NvmeStore and fio each take the median of 3 runs
# per direction. The table shows every round and the median ratio over the rounds.
#
# usage: scripts/bench-offload.sh BUILD_DIR [NVME_DIR]
#   NVME_DIR defaults to a new directory under ${TMPDIR:-/tmp}. Environment: ROUNDS (3),
#   BLOCK_SIZE (bytes, 1048576 = DeepSpeed's aio.block_size default), QUEUE_DEPTH (8, aio.queue_depth),
#   SIZE_MIB (256, bytes written and read per run), FIO_ENGINES ("io_uring libaio"), FIO_EXTRA (more
#   fio arguments, e.g. "--iodepth_batch_submit=8").
set -euo pipefail

build_dir=${1:?usage: scripts/bench-offload.sh BUILD_DIR [NVME_DIR]}
zerolens="$build_dir/cli/zerolens"
rounds=${ROUNDS:-3}
block_size=${BLOCK_SIZE:-1048576}
queue_depth=${QUEUE_DEPTH:-8}
size_mib=${SIZE_MIB:-256}
engines=${FIO_ENGINES:-io_uring libaio}
read -r -a fio_extra <<<"${FIO_EXTRA:-}"

[ -x "$zerolens" ] || { echo "bench-offload: $zerolens not found (build the zerolens target first)" >&2; exit 2; }
command -v fio >/dev/null || { echo "bench-offload: fio not found (scripts/install-deps.sh installs it)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "bench-offload: python3 not found" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/zerolens-bench-XXXXXX")
nvme_dir=${2:-$work/nvme}
mkdir -p "$nvme_dir"
[ -d "$nvme_dir" ] && [ -w "$nvme_dir" ] || { echo "bench-offload: $nvme_dir is not a writable directory" >&2; exit 2; }
fio_file="$nvme_dir/zerolens-bench-fio.dat"
trap 'rm -rf "$work"; rm -f "$fio_file"' EXIT

fio_bandwidth() {  # engine rw -> bytes/s, the median of 3 runs as calibrate takes for NvmeStore
  local engine=$1 rw=$2
  for run in 1 2 3; do
    [ "$rw" = write ] && rm -f "$fio_file"  # a new file each time, as NvmeStore writes one
    fio --name=zerolens-bench --filename="$fio_file" --rw="$rw" --bs="$block_size" --size="${size_mib}M" \
      --iodepth="$queue_depth" --direct=1 --ioengine="$engine" "${fio_extra[@]}" --output-format=json 2>/dev/null |
      python3 -c "import json, sys; print(json.load(sys.stdin)['jobs'][0]['$rw']['bw_bytes'])"
  done | sort -g | sed -n 2p
}

echo "bench-offload: $(df -T "$nvme_dir" | awk 'NR == 2 {print $2 " filesystem on " $1}') at $nvme_dir;" \
  "block $block_size B, queue depth $queue_depth, ${size_mib} MiB per run, $rounds rounds"
for round in $(seq "$rounds"); do
  "$zerolens" calibrate --gemm-sizes 256 --sizes 4KiB --repeats 5 --nvme-path "$nvme_dir" \
    --nvme-bytes "${size_mib}MiB" --block-size "$block_size" --queue-depth "$queue_depth" \
    --report "$work/calibrate-$round.json" -o /dev/null 2>"$work/calibrate-$round.log" ||
    { cat "$work/calibrate-$round.log" >&2; exit 1; }
  for engine in $engines; do
    for rw in write read; do
      echo "$round $engine $rw $(fio_bandwidth "$engine" "$rw")" >>"$work/fio.txt"
    done
  done
done

python3 - "$work" "$rounds" <<'EOF'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
fio = {}
for line in open(f"{work}/fio.txt"):
    round_, engine, rw, bw = line.split()
    fio[(int(round_), engine, rw)] = float(bw)
engines = sorted({engine for (_, engine, _) in fio}, key=lambda e: e != "io_uring")
gb = lambda value: f"{value / 1e9:.2f}"
header = ["round", "triad GB/s", "Adam GB/s", "Adam/triad", "NvmeStore W", "NvmeStore OW", "NvmeStore R"]
for engine in engines:
    header += [f"fio {engine} W", f"fio {engine} R", f"W/{engine}", f"R/{engine}"]
rows, ratios = [], {}
for r in range(1, rounds + 1):
    report = json.load(open(f"{work}/calibrate-{r}.json"))
    triad = report["memory"]["triad_bytes_per_second"]
    adam = report["adam"]["bytes_per_second"]
    nvme = report["nvme"]
    write, read = nvme["write_bytes_per_second"], nvme["read_bytes_per_second"]
    overwrite = nvme["overwrite_bytes_per_second"]
    row = [str(r), gb(triad), gb(adam), f"{adam / triad:.2f}", gb(write), gb(overwrite), gb(read)]
    ratios.setdefault("Adam / STREAM triad", []).append(adam / triad)
    for engine in engines:
        fw, fr = fio[(r, engine, "write")], fio[(r, engine, "read")]
        row += [gb(fw), gb(fr), f"{write / fw:.2f}", f"{read / fr:.2f}"]
        ratios.setdefault(f"NvmeStore write / fio {engine} write", []).append(write / fw)
        ratios.setdefault(f"NvmeStore overwrite / fio {engine} write", []).append(overwrite / fw)
        ratios.setdefault(f"NvmeStore read / fio {engine} read", []).append(read / fr)
    rows.append(row)
widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
for line in [header] + rows:
    print("  ".join(cell.rjust(width) for cell, width in zip(line, widths)))
mode = report["nvme"]["mode"] + (f" ({report['nvme']['mode_reason']})" if report["nvme"]["mode_reason"] else "")
print(f"\nNvmeStore mode: {mode}; host: {report['host']['cpu']}, {report['host']['threads_per_rank']} threads;"
      " Adam counts 28 B/parameter, triad 12 B/element (STREAM)")
print("median over rounds (target >= 0.80; 'overwrite' writes over the previous version in place, as the"
      " engine's swap writes do every step, and is informational: fio writes a new file)")
for name, values in ratios.items():
    median = statistics.median(values)
    print(f"  {name:<40} {median:5.2f}  {'ok' if median >= 0.8 else 'BELOW TARGET'}")
EOF
