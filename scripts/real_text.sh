#!/usr/bin/env bash
# Builds the real-text corpus of the FP8 recipe study (docs/numerics.md) without the network:
# the English quotations of Debian's `fortunes` package (BSD licence, ~2.5 MB, installed by
# scripts/setup.sh), one document per fortune, a SentencePiece tokenizer trained on them
# (vocabulary 1024) and token shards encoded with it.
# Usage: scripts/real_text.sh [OCTET] [OUT]   (defaults: build/octet, build/real_text)
# Writes OUT/fortunes.txt, OUT/tok.model, OUT/shards/{train,val}_*.bin; does nothing when
# OUT/shards exists already.
set -euo pipefail
octet=${1:-build/octet}
out=${2:-build/real_text}
src=/usr/share/games/fortunes
if [ -d "$out/shards" ]; then
  echo "real_text: $out/shards exists"
  exit 0
fi
if [ ! -d "$src" ]; then
  echo "real_text: $src is missing: install Debian's fortunes package (scripts/setup.sh)" >&2
  exit 1
fi
mkdir -p "$out"
# Every text file of the package but the ASCII pictures; the '%' lines that end each fortune
# become blank lines, which `octet tokenize` takes as document boundaries. Sorted file names
# and LC_ALL=C keep the corpus the same on every machine with the same package version.
export LC_ALL=C
files=$(find "$src" -maxdepth 1 -type f ! -name '*.*' ! -name 'ascii-art' | sort)
# shellcheck disable=SC2086
cat $files | sed 's/^%$//' | iconv -f utf-8 -t utf-8 -c > "$out/fortunes.txt"
echo "real_text: $(wc -c < "$out/fortunes.txt") bytes of text from $(echo "$files" | wc -l) files"
"$octet" tokenize --train --input "$out/fortunes.txt" --model-prefix "$out/tok" \
  --vocab-size 1024 --model-type bpe --threads 2
"$octet" tokenize --input "$out/fortunes.txt" --model "$out/tok.model" --output "$out/shards.tmp" \
  --split blank --val-tokens 65536
mv "$out/shards.tmp" "$out/shards"
ls -l "$out/shards"
