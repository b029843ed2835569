"""The fake `nvidia-imex-ctl` as a POSIX sh script: what cdctl.sim.node.fakeimex installs under that name.

Every readiness probe of every simulated daemon pod (`cdctl daemon check`) and every poll of a daemon's
readiness monitor runs `nvidia-imex-ctl -q`; on a 144-node rack that is hundreds of calls a second on the one
machine. A Python interpreter costs 8 to 25 ms of CPU per call, a shell about one, so the command is this
script, using shell built-ins only (no command substitution, no other program). It answers exactly as
`python -m cdctl.sim.node.fakeimex ctl` does (tests/sim/node/test_fakeimex.py runs both): `-q` prints `READY`
when the local daemon is registered and alive under a node id and every entry of its node list that resolves
(an address, or a name the hosts file maps; the unused-slot address counts as UNUSED) is served by a live
daemon under that entry's node id whose own node list has this daemon's entry at this daemon's node id (a
peer that does not list it would refuse it), else `NOT_READY`; `-N` lists each entry with UP / DOWN /
UNRESOLVED / UNUSED / MISMATCH; no daemon at the config's address prints `UNAVAILABLE: ...` and exits 1; a
bad argument or an unreadable config exits 2. The registry format it reads (one file per address: pid,
address, node id, then the node list, a line each) is written by cdctl.sim.node.fakeimex.Registry.
"""

from __future__ import annotations

SCRIPT = r"""#!/bin/sh
# Fake nvidia-imex-ctl (cdctl.sim.node.fakeimexctl): shell built-ins only, so that a probe costs a
# millisecond.
set -f
config=/etc/nvidia-imex/config.cfg
query=
list=
while [ $# -gt 0 ]; do
  case $1 in
    -c|--config) if [ $# -gt 1 ]; then config=$2; shift; else config=; fi ;;
    --config=*) config=${1#--config=} ;;
    -q|--query) query=1 ;;
    -N|--nodes) list=1 ;;
    *) echo "error: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
if [ -d "$config" ] || [ ! -r "$config" ]; then
  if [ -e "$config" ]; then why="Permission denied"; else why="No such file or directory"; fi
  echo "error: cannot read IMEX config $config: $why" >&2
  exit 2
fi
cmd_ip=
bind_ip=
while IFS= read -r line || [ -n "$line" ]; do
  line=${line#"${line%%[![:space:]]*}"}
  line=${line%"${line##*[![:space:]]}"}
  case $line in
    ''|'#'*) continue ;;
    *=*) ;;
    *) echo "error: $config: not a KEY=VALUE line: '$line'" >&2; exit 2 ;;
  esac
  key=${line%%=*}
  key=${key%"${key##*[![:space:]]}"}
  value=${line#*=}
  value=${value#"${value%%[![:space:]]*}"}
  case $key in
    IMEX_CMD_BIND_INTERFACE_IP) cmd_ip=$value ;;
    BIND_INTERFACE_IP) bind_ip=$value ;;
  esac
done < "$config"
address=${cmd_ip:-${bind_ip:-127.0.0.1}}
registry=${CDCTL_FAKE_IMEX_DIR:-/tmp/cdctl-fake-imex}
hosts=${CDCTL_FAKE_IMEX_HOSTS:-/etc/hosts}
unused=__UNUSED__

alive() {  # 0 when a live daemon is registered at address $1; its IMEX node id in $entry_id
  entry_file=$registry/$1
  entry_id=
  [ -f "$entry_file" ] || return 1
  pid=
  { IFS= read -r pid && IFS= read -r entry_address && IFS= read -r entry_id; } < "$entry_file" 2>/dev/null \
    || return 1
  case $pid in ''|*[!0-9]*) return 1 ;; esac
  case $entry_id in ''|-*|*[!0-9]*) entry_id=-1 ;; esac
  kill -0 "$pid" 2>/dev/null
}

is_address() {  # 0 for a dotted IPv4 address or anything with a colon (IPv6)
  case $1 in *:*) return 0 ;; ''|*[!0-9.]*|.*|*.|*..*) return 1 ;; esac
  old_ifs=$IFS
  IFS=.
  set -- $1
  IFS=$old_ifs
  [ $# -eq 4 ] || return 1
  for part; do [ "$part" -lt 256 ] || return 1; done
  return 0
}

host_words=
host_words_read=
read_hosts() {  # $host_words: each line of the hosts file as "@ address name...", comments dropped
  host_words_read=1
  [ -f "$hosts" ] && [ -r "$hosts" ] || return 0
  while IFS= read -r host_line || [ -n "$host_line" ]; do
    host_line=${host_line%%#*}
    set -- $host_line
    [ $# -ge 2 ] || continue
    host_words="$host_words @ $*"
  done < "$hosts"
}

resolve() {  # $resolved: the first address the hosts file gives name $1, else empty
  # The file is read once per call of the script: `read` takes a byte per system call, and reading the file
  # again for every peer was most of a probe's time.
  resolved=
  [ -n "$host_words_read" ] || read_hosts
  ip=
  next_is_ip=
  for word in $host_words; do
    if [ -n "$next_is_ip" ]; then
      ip=$word
      next_is_ip=
      continue
    fi
    case $word in
      @) next_is_ip=1 ;;
      "$1") resolved=$ip; return 0 ;;
    esac
  done
  return 0
}

if ! alive "$address"; then
  echo "UNAVAILABLE: no IMEX daemon at $address"
  exit 1
fi
own=$entry_file
own_id=$entry_id
ready=READY
[ "$own_id" != -1 ] || ready=NOT_READY

entry_at() {  # $entry: the node-list entry at index $2 of the registry file $1, else empty
  entry=
  at_line=0
  at_index=-1
  while IFS= read -r at_node || [ -n "$at_node" ]; do
    at_line=$((at_line + 1))
    [ $at_line -gt 3 ] || continue
    [ -n "$at_node" ] || continue
    at_index=$((at_index + 1))
    if [ "$at_index" = "$2" ]; then entry=$at_node; return 0; fi
  done < "$1"
  return 0
}
entry_at "$own" "$own_id"
own_entry=$entry
line_number=0
index=-1
while IFS= read -r node || [ -n "$node" ]; do
  line_number=$((line_number + 1))
  [ $line_number -gt 3 ] || continue
  [ -n "$node" ] || continue
  index=$((index + 1))
  if is_address "$node"; then resolved=$node; else resolve "$node"; fi
  if [ "$index" = "$own_id" ] && [ "$resolved" != "$address" ]; then
    state=MISMATCH
  elif [ -z "$resolved" ]; then
    state=UNRESOLVED
  elif [ "$resolved" = "$unused" ]; then
    state=UNUSED
  elif [ "$resolved" = "$address" ]; then
    if [ "$own_id" = "$index" ]; then state=UP; else state=MISMATCH; fi
  elif alive "$resolved"; then
    # A peer accepts this daemon only if its node list has this daemon's entry at this daemon's node id.
    # (Without a node id this daemon is not ready anyway, and the peer's own state is what is shown.)
    state=MISMATCH
    if [ "$entry_id" = "$index" ]; then
      if [ -z "$own_entry" ]; then
        state=UP
      else
        peer_file=$entry_file
        entry_at "$peer_file" "$own_id"
        [ "$entry" != "$own_entry" ] || state=UP
      fi
    fi
  else
    state=DOWN
  fi
  case $state in DOWN|MISMATCH) ready=NOT_READY ;; esac
  if [ -n "$list" ]; then printf '%s\t%s\n' "$node" "$state"; fi
done < "$own"
if [ -n "$query" ]; then echo "$ready"; fi
exit 0
"""


def script(unused_address: str) -> str:
    """The script's text, with the address of slots no daemon holds (UNUSED, never DOWN)."""
    return SCRIPT.replace("__UNUSED__", unused_address)
