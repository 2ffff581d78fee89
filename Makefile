# Two commands to start with: `make plan STACK=dev` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STACK ?= dev
# Times a recipe line into the phase table `make test` prints (tools/ci/phase.sh).
PHASE := bash tools/ci/phase.sh
BASE ?= origin/main
# STACK and BASE reach the commands as environment variables, each one argument whatever it holds:
# `make plan STACK='dev; touch x'` runs no `touch` and `STACK='dev --out /x'` adds no option. Make
# never expands them: `$(value ...)` takes them as written, and `unexport` stops make from exporting
# (so expanding) the command-line variables themselves. The plan then refuses a stack name the
# Pulumi CLI refuses (settings/stack_file.py), in one line.
export TPU_SLICING_STACK := $(value STACK)
export TPU_SLICING_BASE := $(value BASE)
unexport STACK BASE
# ESC_VALUES: for a stack file that imports ESC environments, NAME=FILE pairs of what `pulumi env
# open NAME --format detailed` printed (settings/esc_environment.py, docs/deploy.md); passed the same way.
ifdef ESC_VALUES
export TPU_SLICING_ESC_VALUES := $(value ESC_VALUES)
unexport ESC_VALUES
endif

.PHONY: plan preview test check flake-check lint unit bench lock clean diff graph docs schema stacks fleet engine controlplane loadgen crds gcpdata policy-venv real-preview

$(VENV)/.runtime: requirements.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PHASE) "venv runtime" $(PY) -m pip install -q --disable-pip-version-check -r requirements.txt -c constraints.txt
	touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt
	$(PHASE) "venv dev" $(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt -c constraints.txt
	touch $@

# The policy pack's own virtualenv: the CLI runs a local pack from policy/venv but never creates it.
policy/venv/.ready: policy/requirements.txt constraints.txt
	$(PYTHON) -m venv policy/venv
	$(PHASE) "venv policy" policy/venv/bin/python -m pip install -q --disable-pip-version-check -r policy/requirements.txt
	touch $@

policy-venv: policy/venv/.ready

## engine: build the real pulumi CLI, Kubernetes provider, its Helm and the test chart registry from pinned Go modules (cached outside the repo)
engine:
	$(PHASE) "build engine" bash tools/engine/build.sh

## controlplane: build the local control plane's etcd, kube-apiserver, -controller-manager, -scheduler and kwok (cached outside the repo)
controlplane:
	$(PHASE) "build controlplane" bash tools/controlplane/build.sh

## loadgen: the serving benchmark's load generator, inference-perf, from PyPI at the image's release, in a venv outside the repo (needs Python 3.12+)
loadgen:
	$(PHASE) "build loadgen" bash tools/loadgen/build.sh

## crds: lay out the upstream CRDs the tests use from each component's Go module (pins and sha256: tools/crds/pins.tsv), outside the repo
crds:
	$(PHASE) crds bash tools/crds/fetch.sh

## gcpdata: download Google's API discovery documents (google.golang.org/api, pin: tools/gcpdata/go.mod) into the Go module cache: test data for the GCP stand-in
gcpdata:
	$(PHASE) gcpdata bash -c 'bash tools/gcpdata/fetch.sh >/dev/null'

## real-preview: a real `pulumi preview` of stack $(STACK) on a local backend (stand-ins for GCP, see README)
real-preview: engine $(VENV)/.dev policy/venv/.ready
	$(PY) -m tests.engine preview --stack="$$TPU_SLICING_STACK"

## plan: print what stack $(STACK) would create (no Pulumi CLI, no cloud credentials)
plan: $(VENV)/.runtime
	$(PY) -m plan --stack="$$TPU_SLICING_STACK"

## reservation: the block stack $(STACK) binds, sub-block by sub-block (health, free hosts, stacks, maintenance), from a snapshot or gcloud
reservation: $(VENV)/.runtime
	$(PY) -m plan reservation --stack="$$TPU_SLICING_STACK"

## preview: the same for a brand-new stack, with cloud-computed values unknown
preview: $(VENV)/.runtime
	$(PY) -m plan --stack="$$TPU_SLICING_STACK" --preview

## diff: Markdown diff of stack $(STACK) between $(BASE) (default origin/main) and the working tree
diff: $(VENV)/.runtime
	$(PY) -m plan diff --stack="$$TPU_SLICING_STACK" --base="$$TPU_SLICING_BASE"

## graph: print the stack's dependency picture as Mermaid text
graph: $(VENV)/.runtime
	$(PY) -m plan graph --stack="$$TPU_SLICING_STACK"

## docs: regenerate docs/dev-graph.mmd (and the SVG when Graphviz is installed)
docs: $(VENV)/.runtime
	$(PY) -m plan graph --stack dev --mermaid docs/dev-graph.mmd --dot build/dev-graph.dot
	-$(PY) -m plan graph --stack dev --image docs/dev-graph.svg

## schema: regenerate docs/stack-file.schema.json (editors validate stack files with it) and docs/configuration-reference.md
schema: $(VENV)/.runtime
	$(PY) -m plan schema --out docs/stack-file.schema.json --reference docs/configuration-reference.md

## fleet: every stack at a glance (block, chips reserved and held, high-priority work pending, cost) and the cross-stack checks
fleet: $(VENV)/.runtime
	$(PY) -m plan fleet

## stacks: check reservation claims and names across every Pulumi.<stack>.yaml
stacks: $(VENV)/.runtime
	$(PY) -m plan stacks

## test: lint, type-check and run the whole test suite (what CI runs); ends with the time of each phase
test:
	@mkdir -p build && : > build/phases.tsv
	@# The Go module downloads run beside the builds, not before each (tools/ci/prefetch.sh).
	@TPU_SLICING_PHASES=$(CURDIR)/build/phases.tsv $(PHASE) "beside: go downloads" \
		bash tools/ci/prefetch.sh > build/prefetch.log 2>&1 &
	@# So does the load generator's virtualenv (mostly downloads); `make loadgen` in `unit` then
	@# waits on its lock and finds it made (tools/loadgen/build.sh).
	@TPU_SLICING_PHASES=$(CURDIR)/build/phases.tsv $(PHASE) "beside: loadgen" \
		bash tools/loadgen/build.sh > build/loadgen.log 2>&1 &
	@# The Go builds start now, beside the virtualenvs (mostly downloads), and `unit` waits for them
	@# (tools/ci/builds.sh). One build at a time: the two side by side (make -j3) took 51 min cold
	@# against 32 min one after the other (docs/testing.md, CI phases and timings).
	@TPU_SLICING_PHASES=$(CURDIR)/build/phases.tsv MAKE="$(MAKE)" bash tools/ci/builds.sh start
	@TPU_SLICING_PHASES=$(CURDIR)/build/phases.tsv TPU_SLICING_EARLY_BUILDS=1 \
		$(MAKE) --no-print-directory lint unit; \
		status=$$?; \
		$(PYTHON) tools/ci/phase_table.py build/phases.tsv; exit $$status

## check: lint, type-check and every test that needs no Go build, in minutes (make test is what CI runs)
check: lint $(VENV)/.dev crds gcpdata policy/venv/.ready
	$(PY) -m pytest $(SUITE) -m "not go_built"

## flake-check: run each plane module changed since $(BASE) RUNS times (default 3) with one core held busy; ALL=1 for every plane module
flake-check: $(VENV)/.dev engine controlplane crds gcpdata policy/venv/.ready loadgen
	$(PY) tools/ci/flake_check.py --base="$$TPU_SLICING_BASE" $(if $(ALL),--all) $(if $(RUNS),--runs=$(RUNS))

lint: $(VENV)/.dev
	$(PHASE) "lint ruff" $(VENV)/bin/ruff check .
	$(PHASE) "lint format" $(VENV)/bin/ruff format --check .
	$(PHASE) "lint mypy" $(VENV)/bin/mypy .

# The suite's pytest options: every xdist group on one worker, the groups queued in collection
# order (tests/suite_order.py; pytest-xdist 3.8.0 otherwise sorts them by test count).
SUITE := -n auto --dist loadgroup --no-loadscope-reorder

# The tests without a Go build run beside the builds, the rest after them (tools/ci/unit.sh).
unit: $(VENV)/.dev crds gcpdata policy/venv/.ready loadgen
	PY=$(PY) SUITE="$(SUITE)" MAKE="$(MAKE)" bash tools/ci/unit.sh

## bench: time evaluating the dev stack under mocks against bare SDK import time
bench: $(VENV)/.dev engine controlplane crds policy/venv/.ready
	$(PY) benchmarks/bench_plan.py
	$(PY) benchmarks/bench_engine.py

lock: $(VENV)/.dev
	$(PY) -m pip freeze --exclude-editable | sed '1i # Exact versions of every package, direct and transitive, installed with -c.\n# Regenerate with: make lock' > constraints.txt

clean:
	rm -rf $(VENV) policy/venv build .mypy_cache .ruff_cache .pytest_cache .hypothesis
