#!/usr/bin/env bash
# Runs THERE, on the GPU machine: compares `mopt doctor --json` field by field with `nvidia-smi -q` (its XML form,
# -q -x, the same report structured): driver and CUDA version, memory, ECC mode and error counts, PCIe link,
# clocks, persistence mode, MIG mode, per GPU. Prints one line per field (doctor's value, nvidia-smi's, same or
# DIFFERENT) and exits 1 if a field that both report differs. Fields that move while the two run (used memory,
# clocks of an idle GPU) are compared with a tolerance and marked as such.
#   MOPT_BIN=path/to/mopt bash scripts/doctor_vs_smi.sh     (default: .gpu/mopt, else build/mopt)
# With scripts/gpu_prepare.sh's .gpu folder (carry [".gpu"]) it uses .gpu/mopt and scripts/gpu_env.sh's libraries.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${MOPT_BIN:-}
if [[ -z "$BIN" && -d .gpu ]]; then
  source scripts/gpu_env.sh
  BIN=.gpu/mopt
fi
[[ -z "$BIN" ]] && BIN=build/mopt
[[ -x "$BIN" ]] || { echo "doctor_vs_smi: no mopt binary (set MOPT_BIN)" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "doctor_vs_smi: nvidia-smi not found" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$BIN" doctor --json > "$tmp/doctor.json"
rc=$?
nvidia-smi -q -x > "$tmp/smi.xml" || { echo "doctor_vs_smi: nvidia-smi -q -x failed" >&2; exit 2; }
echo "mopt doctor exit code: $rc"
python3 - "$tmp/doctor.json" "$tmp/smi.xml" <<'PY'
import json, re, sys
import xml.etree.ElementTree as ET

doc = json.load(open(sys.argv[1]))
smi = ET.parse(sys.argv[2]).getroot()
MiB = 1024 * 1024

def text(node, path):
    n = node.find(path)
    return None if n is None or n.text is None else n.text.strip()

def num(s):
    if s is None:
        return None
    m = re.match(r"\s*([0-9.]+)", s)
    return float(m.group(1)) if m else None

def enabled(s):
    return None if s is None else s.strip().lower() in ("enabled", "enable", "on")

rows, differ = [], 0
def compare(field, ours, theirs, tol=0.0, note=""):
    global differ
    if ours is None or theirs is None:
        verdict = "n/a"
    elif isinstance(ours, (int, float)) and isinstance(theirs, (int, float)):
        ok = abs(ours - theirs) <= tol * max(abs(theirs), 1)
        verdict = "same" if ok else "DIFFERENT"
    else:
        verdict = "same" if str(ours) == str(theirs) else "DIFFERENT"
    differ += verdict == "DIFFERENT"
    rows.append((field, ours, theirs, verdict + (f" ({note})" if note else "")))

drv = doc["facts"]["gpu"]["driver"]
compare("driver version", drv["driver_version"] or None, text(smi, "driver_version"))
compare("CUDA version", drv["cuda_version"] or None, text(smi, "cuda_version"))
gpus = doc["facts"]["gpu"]["gpus"]
smi_gpus = smi.findall("gpu")
compare("GPU count", len(gpus), len(smi_gpus))
by_bus = {g.get("id", "").upper(): g for g in smi_gpus}
for g in gpus:
    s = by_bus.get(g["bus_id"].upper())
    if s is None and g["index"] < len(smi_gpus):
        s = smi_gpus[g["index"]]
    p = f"gpu{g['index']} "
    if s is None:
        rows.append((p + "present in nvidia-smi", True, False, "DIFFERENT"))
        differ += 1
        continue
    compare(p + "name", g["name"], text(s, "product_name"))
    compare(p + "uuid", g["uuid"], text(s, "uuid"))
    mem = g["memory"]
    tot = num(text(s, "fb_memory_usage/total"))
    res = num(text(s, "fb_memory_usage/reserved")) or 0
    compare(p + "memory total MiB", mem["total_bytes"] and mem["total_bytes"] / MiB, tot, 0.001)
    # NVML's v1 memory query (doctor's) counts the driver's reservation as used; nvidia-smi lists it apart.
    used = num(text(s, "fb_memory_usage/used"))
    compare(p + "memory used MiB (+ reserved)", mem["used_bytes"] and mem["used_bytes"] / MiB,
            None if used is None else used + res, 0.05, "moves")
    ecc = g["ecc"]
    compare(p + "ECC mode", ecc["enabled"], enabled(text(s, "ecc_mode/current_ecc")))
    vol = s.find("ecc_errors/volatile")
    if vol is not None:
        if vol.find("single_bit/total") is not None:  # older drivers: single_bit / double_bit totals
            corr, unc = num(text(vol, "single_bit/total")), num(text(vol, "double_bit/total"))
        else:  # sram_correctable, sram_uncorrectable_parity, dram_uncorrectable, ...
            corr = unc = 0.0
            for child in vol:
                v = num(child.text) if child.text and child.text.strip() != "N/A" else None
                if v is None:
                    continue
                if "uncorrectable" in child.tag:
                    unc += v
                elif "correctable" in child.tag:
                    corr += v
        compare(p + "ECC corrected (volatile)", ecc["corrected_volatile"], corr)
        compare(p + "ECC uncorrected (volatile)", ecc["uncorrected_volatile"], unc)
    pcie = g["pcie"]
    compare(p + "PCIe gen current", pcie["gen"], num(text(s, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")))
    compare(p + "PCIe gen max", pcie["gen_max"], num(text(s, "pci/pci_gpu_link_info/pcie_gen/max_link_gen")))
    compare(p + "PCIe width current", pcie["width"], num(text(s, "pci/pci_gpu_link_info/link_widths/current_link_width")))
    compare(p + "PCIe width max", pcie["width_max"], num(text(s, "pci/pci_gpu_link_info/link_widths/max_link_width")))
    clk = g["clocks_mhz"]
    compare(p + "SM clock MHz", clk["sm"], num(text(s, "clocks/sm_clock")), 0.1, "moves")
    compare(p + "SM clock max MHz", clk["sm_max"], num(text(s, "max_clocks/sm_clock")))
    compare(p + "memory clock MHz", clk["mem"], num(text(s, "clocks/mem_clock")), 0.1, "moves")
    compare(p + "memory clock max MHz", clk["mem_max"], num(text(s, "max_clocks/mem_clock")))
    compare(p + "persistence mode", g["persistence_mode"], enabled(text(s, "persistence_mode")))
    mig = g["mig"]["current"]
    compare(p + "MIG mode", None if mig is None else bool(mig), enabled(text(s, "mig_mode/current_mig")))
    compare(p + "temperature C", g["temperature_c"]["gpu"], num(text(s, "temperature/gpu_temp")), 0.1, "moves")
    lim = text(s, "gpu_power_readings/current_power_limit") or text(s, "power_readings/enforced_power_limit") \
        or text(s, "power_readings/power_limit")
    compare(p + "power limit W", g["power_w"]["limit"], num(lim), 0.01)

w = max(len(r[0]) for r in rows)
print(f"{'field':<{w}}  {'mopt doctor':>28}  {'nvidia-smi -q':>28}  result")
for f, a, b, v in rows:
    fmt = lambda x: "-" if x is None else (f"{x:.1f}" if isinstance(x, float) else str(x))
    print(f"{f:<{w}}  {fmt(a):>28}  {fmt(b):>28}  {v}")
print(f"\n{len(rows)} fields, {differ} different")
print("\ndoctor verdicts:")
for c in doc["checks"]:
    print(f"  [{c['verdict']:<4}] {c['id']}: {c['evidence'][:150]}")
sys.exit(1 if differ else 0)
PY
