#!/usr/bin/env bash
# Prints danki's version: the nearest v* tag (git describe: v0.1.0, or
# v0.1.0-3-gabc1234 after it, -dirty with local changes); without a tag
# v0.0.0-dev.<commit>, without git v0.0.0-dev. Valid as SemVer, a Helm chart
# version and an image tag.
set -euo pipefail
cd "$(dirname "$0")/.."
if v=$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null); then
	echo "$v"
elif c=$(git describe --always --dirty 2>/dev/null); then
	echo "v0.0.0-dev.$c"
else
	echo v0.0.0-dev
fi
