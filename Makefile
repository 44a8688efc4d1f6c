# Two commands for a fresh machine (run as root: the lab starts a Docker engine):
#   make demo   the admin's path on the lab (3 nodes, the NFS VM): the README's install of the release, then dltune.cluster.site, each node's audit and bench (and one over Slurm), the report
#   make test   everything CI runs: venv, lab, linters, staging and input tests on Python 3.10, pytest, each role's molecule scenario, lab down
#   make test-slow   what make test leaves out for CI's minutes: molecule default (the whole site, ~12 min) and the molecule tests marked slow, nfs_multivip tiers 2 and 3 (a VM under QEMU/TCG, ~40 min), the lab tests marked slow, root
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# make test runs every role's scenario; `default` (the whole site on a 22.04 Slurm node and a 24.04
# node: 12 minutes) runs in make test-slow: the lab runs the same site twice from the installed
# collection (tests/integration/test_site_lab.py) and each role's own scenario has its check mode.
SLOW_SCENARIOS := default
SCENARIOS := $(filter-out $(SLOW_SCENARIOS),$(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))))
# Scenarios whose verifier holds tests marked slow (make test deselects them: molecule.yml's `m`);
# make test-slow runs these scenarios again with every test. `=`: its greps run there only.
SCENARIOS_WITH_SLOW_TESTS = $(foreach s,$(SCENARIOS),$(if $(shell grep -l 'mark\.slow' molecule/$(s)/tests/*.py 2>/dev/null),$(s)))

.PHONY: help venv lab lab-down images wheelhouse collection release lint unit py310 browser pytest test-slow fuzz mutation molecule test demo bench clean

help:
	@grep -E '^#' Makefile | head -4

venv: $(VENV)/.installed
# Compiled at install (176 s here; 89 s with --no-compile): the lab's nodes import this venv's torch
# from a read-only mount (tests/lab/torch-env.sh), where no bytecode could be written at import.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	touch $@

lab: venv
	bash tests/lab/lab.sh

lab-down:
	bash tests/lab/lab-down.sh

images:
	bash tests/lab/images.sh

# Needs only python3 with pip (no dev venv): dltune's wheel and its runtime deps for x86_64 and aarch64.
wheelhouse:
	bash tests/lab/wheelhouse.sh

# The Ansible collection dltune.cluster, built by allow-list (tests/lab/collection.sh: the files git
# tracks under its entries, and the wheelhouse at build/wheelhouse, the same path inside the installed
# collection): build/dltune-cluster-*.tar.gz. Needs python3 with pip and ansible-galaxy.
collection: wheelhouse
	bash tests/lab/collection.sh

# What an offline controller installs: build/release/ holds dltune.cluster (the nodes' wheels inside)
# and its dependency collections ansible.posix and community.general, taken from this controller's
# Ansible (the `ansible` package from PyPI carries them): no Galaxy anywhere.
release: wheelhouse
	bash tests/lab/collection.sh release

lint: venv
	ruff check .
	ruff format --check .
	mypy
	yamllint --strict .
	ansible-lint

# The quick unit run: every decision at its boundaries, no fuzzing, under a minute on 2 cores.
unit: venv
	pytest tests/unit -m "not fuzz" -n 2

# The oldest Python the project admits (3.10: Ubuntu 22.04's) runs the unit tests of the code that
# depends on the interpreter's version (staging: tarfile's data filter, descriptor-relative os calls;
# bounded JSON and inputs, the CLI's error boundary, records against 3.10's dataclasses), in a venv of
# its own (about 2 minutes).
PY310 ?= $(firstword $(wildcard /root/.pyenv/versions/3.10.*/bin/python3.10) $(shell command -v python3.10))
PY310_TESTS := test_stage test_stage_hostile test_stage_broadcast test_hostile_inputs test_cli test_records
py310:
	@if [ -z "$(PY310)" ]; then echo "py310: no Python 3.10 on this machine (pyenv or python3.10): tier skipped"; exit 0; fi; \
	set -e; $(PY310) -m venv build/py310; \
	build/py310/bin/pip install --quiet --no-compile -e . 'pytest>=8,<10' 'hypothesis>=6.100,<7' 'zstandard>=0.22,<1'; \
	build/py310/bin/python -c 'import sys, tarfile; print("py310:", sys.version.split()[0], "data filter:", hasattr(tarfile, "data_filter"))'; \
	build/py310/bin/python -m pytest -q -p no:cacheprovider $(foreach t,$(PY310_TESTS),tests/unit/$(t).py)

# Debian's chromium renders the HTML report in tests/integration/test_report_browser.py.
browser:
	@command -v chromium >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	  chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  --no-install-recommends chromium >/dev/null; }

# Needs the lab (make lab): DLTUNE_LAB_REQUIRED turns a missing lab into a failure, not a skip.
pytest: venv browser
	bash tests/run_pytest.sh

# What make test leaves out for CI's minutes (docs/development.md): molecule default, the molecule
# tests marked slow (their scenarios run again, whole), the NFS VM
# tiers 2 and 3 of nfs_multivip (QEMU under TCG; tier 3 reboots), and the lab tests marked slow, after
# the lab's site convergence they build on (`converge`). Root; it starts the lab and leaves it up.
test-slow: lab
	@for s in $(SLOW_SCENARIOS); do molecule test -s $$s || exit 1; done
	DLTUNE_MOLECULE_MARKS="slow or not slow" bash tests/run_molecule.sh $(SCENARIOS_WITH_SLOW_TESTS)
	DLTUNE_LAB_REQUIRED=1 pytest -m "slow or converge"

# The parser and report fuzz tests with ten times the examples of make test (about 20 minutes).
fuzz: venv
	DLTUNE_FUZZ_EXAMPLES=$${DLTUNE_FUZZ_EXAMPLES:-20000} pytest tests/unit/test_parsers_fuzz.py \
	  tests/unit/test_cluster_report.py::test_no_node_file_crashes_the_report

# Every scenario, two at a time (tests/run_molecule.sh: nvidia_driver beside the others, which run one
# after another; data_disks, the one loop-device scenario, never beside another one). All run; any
# failure fails. Each scenario's output also goes to build/logs/molecule-<scenario>.log
# (tests/run_all.sh ends with the failing lines of each failed one, so that the end of a CI log says why).
molecule: venv
	bash tests/run_molecule.sh $(SCENARIOS)

test:
	bash tests/run_all.sh

# The admin's path (tests/lab/demo.sh): the README's Install block verbatim, outside the checkout, then
# the installed dltune.cluster's site, bench and audit on the lab; the report in build/report/.
demo: lab
	bash tests/lab/nfs-vm.sh up
	bash tests/lab/demo.sh

# Mutation testing of the decision modules ([tool.mutmut] in pyproject.toml): mutmut, then the score
# and every survivor not explained in tests/mutation_equivalent.txt. Incremental: mutants/ keeps results.
mutation: venv
	python tests/mutation.py run --max-children 2 || true
	python tests/mutation.py score

# Speed, as ratios against a baseline in the same run (not part of make test).
bench: lab
	$(PY) benchmarks/audit_speed.py
	$(PY) benchmarks/audit_speed.py --fabric
	$(PY) benchmarks/noatime.py
	$(PY) benchmarks/nfs_audit.py
	@command -v rsync >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync >/dev/null
	$(PY) benchmarks/stage.py
	$(PY) benchmarks/stage_broadcast.py
	$(PY) benchmarks/bench_quick.py
	$(PY) benchmarks/playbook.py

clean: lab-down
	rm -rf build .cache

# The scale lab (tests/scale/scale-lab.sh, docs/scale.md): N sshd-only nodes reached over real SSH with
# host keys checked, inventory in /var/tmp/dltune-scale/inventory.yml; root. scale-lab-down removes
# exactly its containers, network (by label), guard route and keys. The benchmark on it:
# benchmarks/playbook_scale.py.
.PHONY: scale-lab scale-lab-down
N ?= 10
scale-lab: venv
	bash tests/scale/scale-lab.sh up $(N)

scale-lab-down:
	bash tests/scale/scale-lab.sh down
