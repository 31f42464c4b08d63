#!/usr/bin/env bash
# Moved: the pip check of the one gcpressure package (which `pip install
# ./examples/torch` installs too) is examples/python/check_pip.sh.
exec bash "$(dirname "$0")/../python/check_pip.sh" "$@"
