#!/usr/bin/env bash
# The Debian package (cmake/package.cmake): cpack builds it from the build folder; it holds the binary, the man page,
# the systemd unit and /etc/mopt/serve.toml (a conffile); dpkg installs it into an empty root whose package database
# has only the host's entries for the packages it depends on (so dpkg itself checks that Debian 12 satisfies the
# Depends line); the Depends line covers every shared library the binary needs and the glibc symbol versions it uses;
# the installed mopt, with the shipped serve.toml, serves stories260K; the unit passes systemd-analyze verify and
# its security rating is "OK".
set -euo pipefail
: "${MOPT_BIN:?}" "${MOPT_MODELS_DIR:?}" "${MOPT_BUILD_DIR:?}"
tmp=$(mktemp -d)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
for tool in cpack dpkg dpkg-deb objdump systemd-analyze; do
  command -v "$tool" >/dev/null || fail "$tool is missing: run scripts/install_deps.sh"
done

# ---- build
(cd "$MOPT_BUILD_DIR" && cpack -G DEB -B "$tmp/pkg") > "$tmp/cpack.log" 2>&1 || { cat "$tmp/cpack.log"; fail "cpack"; }
debs=("$tmp"/pkg/mopt_*.deb)
[[ ${#debs[@]} -eq 1 && -f "${debs[0]}" ]] || fail "cpack made no single mopt_*.deb: ${debs[*]}"
deb=${debs[0]}
echo "ok: cpack -G DEB built $(basename "$deb")"

contents=$(dpkg-deb -c "$deb" | awk '{$1 = $2 = $3 = $4 = $5 = ""; sub(/^ +/, ""); print}')
for want in ./usr/lib/mopt/mopt "./usr/bin/mopt -> ../lib/mopt/mopt" ./usr/share/man/man1/mopt.1.gz \
            ./usr/lib/systemd/system/mopt.service ./etc/mopt/serve.toml ./usr/share/doc/mopt/deploy.md; do
  grep -qxF -- "$want" <<< "$contents" || fail "the package lacks $want"$'\n'"$contents"
done
if [[ "${MOPT_CUDA_BUILT:-OFF}" == ON ]]; then
  grep -qxF ./usr/lib/mopt/libmopt_cuda.so <<< "$contents" || fail "a CUDA build's package lacks libmopt_cuda.so"
else
  ! grep -q libmopt_cuda <<< "$contents" || fail "a build without CUDA packs libmopt_cuda.so"
fi
echo "ok: binary, symlink, man page, unit, serve.toml, docs (CUDA module: ${MOPT_CUDA_BUILT:-OFF})"
[[ "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)" == /etc/mopt/serve.toml ]] ||
  fail "/etc/mopt/serve.toml is not a conffile"
echo "ok: /etc/mopt/serve.toml is a conffile"

# ---- install into a clean root
root=$tmp/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
: > "$root/var/lib/dpkg/status"
depends=$(dpkg-deb -f "$deb" Depends)
arch=$(dpkg-deb -f "$deb" Architecture)
mapfile -t dep_pkgs < <(tr ',' '\n' <<< "$depends" | sed 's/(.*//; s/ //g' | grep .)
for p in "${dep_pkgs[@]}"; do  # the host's entries, so that dpkg checks the versions the Depends line asks for
  { dpkg-query -s "$p:$arch" && echo; } >> "$root/var/lib/dpkg/status" || fail "the host has no $p"
  : > "$root/var/lib/dpkg/info/$p:$arch.list"
done
dpkg --root="$root" -i "$deb" > "$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -i"; }
dpkg --root="$root" -s mopt | grep -qx "Status: install ok installed" || fail "dpkg does not list mopt installed"
echo "ok: dpkg --root installs it, its Depends ($depends) satisfied by this Debian"

# ---- the Depends line is complete
bin=$root/usr/lib/mopt/mopt
mapfile -t needed < <(objdump -p "$bin" | awk '$1 == "NEEDED" {print $2}')
resolved=$(ldd "$bin")
paths=()  # where ldd finds each, with and without /usr (Debian's database may name either), for one dpkg -S
for soname in "${needed[@]}"; do
  path=$(awk -v s="$soname" '$1 == s && $3 ~ /^\// {print $3} $1 ~ "/" s "$" {print $1}' <<< "$resolved" | head -1)
  [[ -n "$path" ]] || fail "ldd does not resolve $soname"
  paths+=("$path" "${path#/usr}" "/usr${path#/usr}")
done
owners=$(dpkg -S "${paths[@]}" 2>/dev/null || true)  # "libc6:amd64: /lib/x86_64-linux-gnu/libm.so.6"
for soname in "${needed[@]}"; do
  owner=$(awk -v s="/$soname" 'substr($2, length($2) - length(s) + 1) == s {sub(/:.*/, "", $1); print $1}' \
            <<< "$owners" | head -1)
  [[ -n "$owner" ]] || fail "no package owns $soname"
  printf '%s\n' "${dep_pkgs[@]}" | grep -qx "$owner" || fail "$soname comes from $owner, which Depends does not list"
done
glibc_min=$(sed -n 's/.*libc6 (>= \([0-9.]*\)).*/\1/p' <<< "$depends")
glibc_used=$(objdump -T "$bin" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
[[ "$(printf '%s\n%s\n' "$glibc_used" "$glibc_min" | sort -V | tail -1)" == "$glibc_min" ]] ||
  fail "the binary uses GLIBC_$glibc_used symbols, Depends asks libc6 >= $glibc_min"
echo "ok: every NEEDED library comes from a package in Depends; glibc symbols up to $glibc_used <= $glibc_min"

# ---- the man page is the binary's help
man=$(zcat "$root/usr/share/man/man1/mopt.1.gz")
[[ "$man" == .TH\ MOPT\ 1* ]] || fail "mopt.1.gz is not a man page"
for flag in --no-web-console --root-path --drain-timeout --config; do
  grep -qF -- "$flag" <<< "$man" || fail "the man page lacks mopt serve $flag"
done
echo "ok: the man page documents mopt serve's flags"

# ---- the installed mopt serves stories260K with the shipped settings (tests/deploy/deb_serve.mjs)
(cd "$(dirname "$0")" && source ../server/check_packages.sh &&
 MOPT_BIN="$root/usr/bin/mopt" MOPT_SERVE_TOML="$root/etc/mopt/serve.toml" node deb_serve.mjs) ||
  fail "the installed mopt does not serve"

# ---- the unit
unit=$root/usr/lib/systemd/system/mopt.service
grep -qx 'ExecStart=/usr/bin/mopt serve --config /etc/mopt/serve.toml' "$unit" || fail "unexpected ExecStart"
sed "s|/usr/bin/mopt|$root/usr/bin/mopt|" "$unit" > "$tmp/mopt.service"  # the binary where this test installed it
verify=$(systemd-analyze verify --man=no "$tmp/mopt.service" 2>&1) && [[ -z "$verify" ]] ||
  fail "systemd-analyze verify: $verify"
echo "ok: systemd-analyze verify mopt.service: no error, no unknown setting"
rating=$(systemd-analyze security --offline=yes "$tmp/mopt.service" 2>&1 | grep 'Overall exposure level')
exposure=$(sed -n 's/.*: \([0-9.]*\) .*/\1/p' <<< "$rating")
awk -v e="$exposure" 'BEGIN { exit !(e != "" && e < 4.0) }' || fail "systemd-analyze security: $rating"
echo "ok: systemd-analyze security: exposure $exposure (below 4, OK)"
echo "all checks passed"
