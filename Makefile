# Every target installs what it needs: `setup` runs first whenever .venv is missing or stale.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PARAMS ?= params/default.yaml
BENCH_OUT ?= outputs/bench
# Cluster files, Jupyter and matplotlib state stay inside the project (see FINDINGS: ipcluster stop).
export IPYTHONDIR := $(CURDIR)/.ipython
export JUPYTER_CONFIG_DIR := $(CURDIR)/.jupyter
export JUPYTER_DATA_DIR := $(CURDIR)/.jupyter/data
export JUPYTER_RUNTIME_DIR := $(CURDIR)/.jupyter/runtime
export MPLCONFIGDIR := $(CURDIR)/.cache/matplotlib
export MPLBACKEND := Agg
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: setup test test-notebooks test-slow lint bench report report-full reference lab data clean kernel

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt scripts/build_horovod.sh
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev,tf,docs,mpi]' -c constraints.txt
	$(PY) -m pip check
	scripts/build_horovod.sh $(VENV)  # Horovod 0.28.1 from source, once; the wheel is cached in ~/.cache/ddlstudy/wheels
	$(PY) -m ddlstudy.cluster.loopback >/dev/null  # the shim that keeps TF's gRPC servers on loopback (cc), into ~/.cache/ddlstudy
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "ddlstudy (.venv)" >/dev/null
	touch $(STAMP)

kernel: setup
	$(PY) -m ipykernel install --user --name ddlstudy --display-name "ddlstudy" >/dev/null

lint: setup
	$(VENV)/bin/ruff check lib tests notebooks/conftest.py

# Unit + integration tests (tests/test_notebooks.py executes `make report`'s chapters, 05 aside,
# through papermill on params/ci.yaml and renders them into a book), then nbval executes the
# other committed notebooks (05, 07-10) with the same tiny params: each notebook runs once
# (notebooks/conftest.py). `make test-notebooks` runs nbval over every notebook.
NBVAL := DDLSTUDY_PARAMS=../params/default.yaml:../params/ci.yaml \
	  ../$(PY) -m pytest -q -p no:cacheprovider --nbval-lax --nbval-current-env \
	  --nbval-cell-timeout=900 --rootdir=. -o addopts="" .
test: setup browser
	$(VENV)/bin/ruff check lib tests notebooks/conftest.py
	$(PY) -m pytest -q --durations=25
	@# beyond one machine, as root: 3 namespace hosts with sshd (ipyparallel's SSH launcher), a
	@# one-node Slurm, Open MPI's mpiexec over ssh (the MPI launcher; the tests apt-get sshd, Slurm
	@# and Open MPI); each skips with one line where it cannot start (not root, no packages)
	$(PY) -m pytest -q -m "multihost or slurm or mpi" -o addopts="--timeout=900"
	cd notebooks && DDLSTUDY_NBVAL_SKIP_RENDERED=1 $(NBVAL)

test-notebooks: setup
	cd notebooks && $(NBVAL)

# Debian's chromium for tests/test_browser.py: installed when root, else that test skips.
.PHONY: browser
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] \
	  && { apt-get install -y -q chromium >/dev/null 2>&1 \
	       || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; } \
	  || echo "chromium not installed (not root): tests/test_browser.py will skip"; }

test-slow: setup
	$(PY) -m pytest -q -m slow

bench: setup
	$(PY) -m ddlstudy.bench collectives --ranks 4 -b 8 -e 64M -f 2 -n 10 -w 3 --out $(BENCH_OUT)/collectives
	$(PY) -m ddlstudy.bench train --out $(BENCH_OUT)/train
	@# allreduce (bucketed, overlapped, ring) vs ddp on 10GbE-like links, compute replayed (root)
	-$(PY) -m ddlstudy.bench train --model resnet50 --workers 4 --batch-size 32 --steps 4 \
	  --warmup-steps 1 --variants allreduce,ddp --repeats 3 --network 10GbE --compute replay \
	  --replay-source gpu --goal 0.95 --no-progress --out $(BENCH_OUT)/train-emulated
	@# Horovod vs ddp, same cell (root; Horovod built by make setup): the ratio with its interval
	-$(PY) -m ddlstudy.bench train --model resnet50 --workers 4 --batch-size 32 --steps 4 \
	  --warmup-steps 1 --variants horovod,ddp --repeats 3 --network 10GbE --compute replay \
	  --replay-source gpu --no-progress --out $(BENCH_OUT)/train-horovod

report: setup
	$(PY) -m ddlstudy.report --params $(PARAMS)

# The rendered book as one PDF (Chromium print-to-PDF of Sphinx's single-page build), its page
# count printed; RUN: a rendered run folder. SHOTS=docs/figures also saves the landing page and
# chapter 99 as PNGs there (docs/book.md shows them).
.PHONY: pdf
RUN ?= outputs/default
pdf: setup browser
	$(PY) -m ddlstudy.report.pdf $(RUN) $(if $(SHOTS),--screenshots $(SHOTS))

# Every chapter, 07-10 included (hours): the quick report's run folder is not reused (run_id full).
report-full: setup
	$(PY) -m ddlstudy.report --params $(PARAMS) --params params/full.yaml

# The papers' grids under emulation (root: network namespaces), resuming cell by cell from what
# results/reference/ already holds; the host calibration is measured once and kept beside them.
REFERENCE_DIR ?= results/reference
REFERENCE_CAL := $(CURDIR)/$(REFERENCE_DIR)/netem_calibration.json
reference: setup
	test -f $(REFERENCE_CAL) || DDLSTUDY_NETEM_CALIBRATION=$(REFERENCE_CAL) $(PY) -m ddlstudy.netem --calibrate
	DDLSTUDY_NETEM_CALIBRATION=$(REFERENCE_CAL) DDLSTUDY_RESUME_ANY_CODE=1 \
	  $(PY) -m ddlstudy.report --params params/default.yaml \
	  --params params/reference.yaml --out $(REFERENCE_DIR)

lab: setup kernel
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks

data: setup
	$(PY) -m ddlstudy.data fetch --dest data

clean:
	-$(PY) -m ddlstudy.cluster --stop-all 2>/dev/null
	rm -rf .ipython .jupyter .cache
