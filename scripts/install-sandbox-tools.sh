#!/bin/sh
# bubblewrap gives the evaluation worker its private mount view, which full
# isolation needs (docs/security.md).  Installed where this can be done without
# asking (root with apt-get, as in CI), after one line saying so; elsewhere one
# line says what is missing.
command -v bwrap >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "installing bubblewrap for the evaluation sandbox (apt-get install bubblewrap, as root)..."
	if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) >/dev/null 2>&1; then
		echo "installed bubblewrap"
		exit 0
	fi
fi
echo "notice: bubblewrap (bwrap) is not installed; evaluations run with partial isolation (install the 'bubblewrap' package for full)"
