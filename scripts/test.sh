#!/usr/bin/env bash
# The test command: installs what the tests need, builds, and runs every
# test (unit and integration, against real sandboxes) as root.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) == 0 ]] || { echo "agentbox: tests run real sandboxes and need root" >&2; exit 1; }
export PATH=$PATH:/usr/local/go/bin
scripts/install-deps.sh
scripts/install-test-deps.sh # prometheus and promtool for the metrics test
scripts/install-k8s.sh       # kube-apiserver and etcd for the Kubernetes tests (once per machine)
make -s build
# The integration tests build their own templates in their own data dir,
# except base, python, node and desktop, which they take from the build
# cache of scripts/build-template.sh (python: examples/data_analysis.py's
# pandas and matplotlib; node: TestBuiltinTemplates' tsc; desktop: Xvfb,
# Chromium and x11vnc for the desktop tests; all built from base's rootfs,
# a few minutes once per machine).
scripts/build-template.sh busybox --no-import
scripts/build-template.sh base --no-import
scripts/build-template.sh python --no-import
scripts/build-template.sh node --no-import
scripts/build-template.sh desktop --no-import
scripts/build-template.sh node-image --no-import # the userland of agentbox's own image (TestNodeImage)
echo "==> go vet"
go vet ./...
echo "==> go test"
# gotestsum (pinned here, built into bin/) runs go test with -json so that
# the run ends with the slowest tests; its output is go test's own.
GOBIN=$PWD/bin go install gotest.tools/gotestsum@v1.13.0
rc=0
rm -f /tmp/agentbox-battery.txt /tmp/agentbox-test.json
AGENTBOX_BATTERY_REPORT=/tmp/agentbox-battery.txt bin/gotestsum --format standard-quiet \
	--jsonfile /tmp/agentbox-test.json -- -count=1 -timeout 40m ./... 2>&1 | tee /tmp/agentbox-test.log || rc=$?
# The hostile battery's item x tier table (go test shows a passing
# package's output only with -v).
echo "==> hostile battery"
cat /tmp/agentbox-battery.txt 2>/dev/null || echo "(no battery report: the integration tests did not run)"
# A short fuzz run of every target (the long runs: make fuzz, docs/SECURITY.md).
# CI_FUZZTIME=ci (the default) is a count of executions per target (about
# 5 s each; scripts/fuzz.sh says why not a duration).
echo "==> fuzz (${CI_FUZZTIME:-ci} per target)"
FUZZTIME=${CI_FUZZTIME:-ci} scripts/fuzz.sh || rc=1
echo "==> the 20 slowest tests"
bin/gotestsum tool slowest --jsonfile /tmp/agentbox-test.json --num 20 || true
echo "==> go test: $( ((rc == 0)) && echo passed || echo FAILED)"
exit $rc
