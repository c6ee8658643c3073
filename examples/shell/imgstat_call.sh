#!/usr/bin/env bash
# Calling imgstat from a shell with curl and protoc alone (no grpcurl, no
# generated code): gRPC is HTTP/2 POSTs of length-prefixed protobuf
# messages, which protoc encodes from and decodes to text. Files of any
# size: the image travels through files and pipes, never the command line.
#
#   examples/shell/imgstat_call.sh analyze photo.png
#   examples/shell/imgstat_call.sh stream-raw frame.raw 4096x3072x1:uint16
#   examples/shell/imgstat_call.sh batch a.png b.jpg c.tif
#
# Needs curl (with HTTP/2, as Debian's), protoc and coreutils. Environment:
#   IMGSTAT_SERVER   host:port (default localhost:50051), plaintext
#   IMGSTAT_PROTO    the folder holding imgstat/v1/imgstat.proto (default: this repository's proto/)
#   IMGSTAT_OPTIONS  Options in protobuf text format (default: every statistic)
# Prints each answer in protobuf text format; exits 1 on a gRPC error.
set -euo pipefail
server=${IMGSTAT_SERVER:-localhost:50051}
proto=${IMGSTAT_PROTO:-$(cd "$(dirname "$0")/../../proto" && pwd)}
options=${IMGSTAT_OPTIONS:-"statistics: STATISTIC_ALL percentiles: [1, 99]"}
chunk_bytes=$((1 << 20))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

encode() { protoc -I "$proto" --encode="imgstat.v1.$1" imgstat/v1/imgstat.proto; }
decode() { protoc -I "$proto" --decode="imgstat.v1.$1" imgstat/v1/imgstat.proto; }

byte() { printf "\\$(printf %03o "$1")"; }
varint() {  # protobuf's base-128 varint
  local v=$1
  while [ "$v" -ge 128 ]; do
    byte $(((v & 127) | 128))
    v=$((v >> 7))
  done
  byte "$v"
}
# A length-delimited field: FIELD, then the bytes of FILE.
field() {
  byte $(($1 << 3 | 2))
  varint "$(stat -c %s "$2")"
  cat "$2"
}

# gRPC's framing: a zero byte (not compressed), the length in 4 bytes big
# endian, the message.
frame() {
  local n
  n=$(stat -c %s "$1")
  printf "\\000\\$(printf %03o $((n >> 24 & 255)))\\$(printf %03o $((n >> 16 & 255)))\\$(printf %03o $((n >> 8 & 255)))\\$(printf %03o $((n & 255)))"
  cat "$1"
}

# POSTs the framed messages in $work/body to METHOD; the answer's frames go
# to $work/answer. The status arrives in the trailers.
call() {
  curl -sS --http2-prior-knowledge -X POST "http://$server/imgstat.v1.ImageStats/$1" \
    -H 'content-type: application/grpc' -H 'te: trailers' --data-binary @"$work/body" \
    -D "$work/headers" -o "$work/answer"
  local status message
  status=$(tr -d '\r' <"$work/headers" | sed -n 's/^grpc-status: //p' | tail -1)
  if [ "${status:-}" != 0 ]; then
    message=$(tr -d '\r' <"$work/headers" | sed -n 's/^grpc-message: //p' | tail -1)
    echo "imgstat: $1: gRPC status ${status:-none}: $(printf '%b' "${message//%/\\x}")" >&2
    return 1
  fi
}

# Each frame of $work/answer, decoded as TYPE.
answers() {
  local size offset=0 n
  size=$(stat -c %s "$work/answer")
  while [ "$offset" -lt "$size" ]; do
    n=0
    for b in $(od -An -v -tu1 -j $((offset + 1)) -N 4 "$work/answer"); do n=$((n * 256 + b)); done
    # tail stops early when head has its bytes: that SIGPIPE is no error.
    { tail -c +$((offset + 6)) "$work/answer" || true; } | head -c "$n" | decode "$1"
    echo
    offset=$((offset + 5 + n))
  done
}

# An AnalyzeRequest for an encoded image FILE into OUT: its small fields
# from text, then input (field 1) { data (field 2) }, which merges into it.
request_of() {
  printf 'input { kind: INPUT_KIND_ENCODED name: "%s" } options { %s }\n' "$1" "$options" | encode AnalyzeRequest >"$2"
  field 2 "$1" >"$work/input"
  field 1 "$work/input" >>"$2"
}

case "${1:-}" in
  analyze)
    request_of "$2" "$work/message"
    frame "$work/message" >"$work/body"
    call Analyze
    answers AnalyzeResponse
    ;;
  stream-raw)  # FILE WxHxC:TYPE: a StreamHeader, then 1 MiB chunks
    IFS='x:' read -r width height channels type <<<"$3"
    printf 'header { input { kind: INPUT_KIND_RAW name: "%s" raw { width: %s height: %s channels: %s sample_type: SAMPLE_TYPE_%s } } options { %s } total_bytes: %s }\n' \
      "$2" "$width" "$height" "$channels" "${type^^}" "$options" "$(stat -c %s "$2")" | encode AnalyzeStreamRequest >"$work/message"
    frame "$work/message" >"$work/body"
    split -b "$chunk_bytes" -d -a 6 "$2" "$work/chunk."
    for part in "$work"/chunk.*; do
      field 2 "$part" >"$work/message"  # AnalyzeStreamRequest { chunk (field 2) }
      frame "$work/message" >>"$work/body"
      rm "$part"
    done
    call AnalyzeStream
    answers AnalyzeResponse
    ;;
  batch)  # FILE...: one BatchRequest per file, id = its position
    shift
    : >"$work/body"
    id=0
    for f in "$@"; do
      request_of "$f" "$work/request"
      printf 'id: "%s"\n' "$id" | encode BatchRequest >"$work/message"
      field 2 "$work/request" >>"$work/message"  # BatchRequest { request (field 2) }
      frame "$work/message" >>"$work/body"
      id=$((id + 1))
    done
    call AnalyzeBatch
    answers BatchResponse
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
