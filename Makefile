# Ferry's build and test entry points. `make help` lists them.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
export PATH := /usr/local/go/bin:$(PATH)

CACHE       ?= $(HOME)/.cache/ferry
BIN         := $(CURDIR)/bin
TOOLS       := $(CACHE)/tools
GOTEST      ?= go test
# The version stamped into bin/ferry (`ferry version`): the git tag
# (vX.Y.Z) when HEAD has one, else the last tag with the commits since and
# the commit, else the commit alone; "-dirty" for uncommitted changes.
VERSION     ?= $(shell git describe --tags --match 'v*' --always --dirty 2>/dev/null || echo dev)
GO_LDFLAGS  := -X main.version=$(VERSION)
# Pinned tools, installed into $(TOOLS) by the targets that need them.
CSI_SANITY_VERSION := v5.6.0
HELM_VERSION       := v4.3.1
HELM               := $(TOOLS)/helm-$(HELM_VERSION)/helm
# promtool of Prometheus v3.16.0 (its Go module's version v0.316.0).
PROMTOOL_VERSION   := v0.316.0
PROMTOOL           := $(TOOLS)/promtool-$(PROMTOOL_VERSION)/promtool

.PHONY: images push helm test-chart test-alerts help build test unit vet lint-layers generate zfs-up sanity demo clean test-replication test-replication-loaded test-watchdog bench-replication bench-replication-ssh bench-transport bench-idle bench-rpo bench-provision bench-move demo-cluster sim

help: ## list targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-24s %s\n", $$1, $$2}'

build: ## build bin/ferry and bin/kubectl-ferry (the kubectl plugin: put it on PATH), stamped with $(VERSION)
	go build -ldflags "$(GO_LDFLAGS)" -o $(BIN)/ferry ./cmd/ferry
	go build -ldflags "$(GO_LDFLAGS)" -o $(BIN)/kubectl-ferry ./cmd/kubectl-ferry

generate: ## regenerate the gomock mocks of the ports
	go generate ./...

lint-layers: ## check that dependencies point inward (domain is pure)
	tests/scripts/lint-layers.sh

vet: ## go vet and gofmt
	go vet ./...
	cd deploy/images && go vet ./...
	@unformatted=$$(find . -name '*.go' -not -path './bin/*' | xargs gofmt -l); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

zfs-up: ## start zfs-fuse if no ZFS is usable (installs it on Debian)
	tests/scripts/zfs-up.sh

# A local Kubernetes cluster (3 nodes in network namespaces, one containerd,
# kubelet and zfs-fuse pool each); see tests/cluster/README.md. Root only.
.PHONY: e2e e2e-node-loss e2e-uninstall e2e-upgrade cluster-bins cluster-sidecars cluster-images cluster-up cluster-down cluster-smoke cluster-deploy test-cluster test-k8s test-kubeapi
cluster-bins: ## build etcd and Kubernetes v1.37.2 from the module proxy into ~/.cache/ferry (slow once)
	tests/cluster/build-bins.sh

cluster-sidecars: ## build the kubernetes-csi sidecars (provisioner, resizer, snapshotter, snapshot-controller) and copy the snapshot CRDs into ~/.cache/ferry
	tests/cluster/sidecars/build.sh

images: ## write Ferry's and the sidecars' images for $(VERSION), linux/amd64 and linux/arm64, as OCI archives in ~/.cache/ferry/images (REGISTRY=ghcr.io/ferry-csi PLATFORMS=... OUT=...)
	VERSION=$(VERSION) deploy/images/build.sh

push: ## write the images and push them: make push REGISTRY=registry.example.com/you (credentials from docker login)
	VERSION=$(VERSION) PUSH=1 deploy/images/build.sh

cluster-images: build ## write the pause, ferry and test images and import them into every node
	tests/cluster/images.sh

cluster-up: build ## start the local 3-node cluster (idempotent); prints its KUBECONFIG
	tests/cluster/up.sh

cluster-deploy: build $(HELM) ## install Ferry through the Helm chart on the running cluster (the test overlay as post-renderer; FERRY_DEPLOY=kustomize: deploy/ through tests/cluster/overlay); waits until every kubelet registered it
	tests/cluster/deploy.sh

cluster-down: ## stop the local cluster and remove everything it made
	tests/cluster/down.sh

cluster-smoke: ## pods on every node, exec, logs, anti-affinity spread, on the running cluster
	tests/cluster/smoke.sh

# The Kubernetes project's External Storage suite (v1.37.2) against Ferry on
# the running local cluster; see tests/e2e/README.md. Brings nothing up.
.PHONY: e2e-k8s-build e2e-k8s-images e2e-k8s-suite e2e-k8s-dry-run
e2e-k8s-build: ## build e2e.test, the ginkgo CLI and agnhost for v1.37.2 into ~/.cache/ferry (once)
	tests/e2e/build.sh

e2e-k8s-images: ## write the e2e test images and import them into every node
	tests/e2e/images.sh

e2e-k8s-dry-run: ## list the External Storage specs e2e-k8s-suite selects (no cluster needed)
	tests/e2e/run.sh --dry-run

e2e-k8s-suite: ## run the External Storage suite against Ferry on the running cluster (make cluster-up cluster-deploy first)
	tests/e2e/run.sh

unit: ## unit, contract (memstore and real ZFS) and app tests (on a fresh zfs-fuse when it serves no pool)
	ZFS_UP_FRESH=1 tests/scripts/zfs-up.sh
	$(GOTEST) -count=1 ./...
	cd deploy/images && $(GOTEST) -count=1 ./...

$(HELM):
	GOBIN=$(dir $(HELM)) nice -n 10 go install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)

helm: $(HELM) ## build helm $(HELM_VERSION) from the Go module proxy into ~/.cache/ferry (once)

$(PROMTOOL):
	GOBIN=$(dir $(PROMTOOL)) nice -n 10 go install github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)

# Ferry's alerts (deploy/helm/ferry/alerts): promtool checks the rule file
# and runs each alert's unit tests (tests/alerts), and every alert's
# runbook_url names a section of docs/runbook.md.
test-alerts: $(PROMTOOL) ## promtool check and test Ferry's alert rules
	$(PROMTOOL) check rules deploy/helm/ferry/alerts/ferry.rules.yaml
	$(PROMTOOL) test rules tests/alerts/ferry.rules.test.yaml
	tests/alerts/runbook-links.sh

# The chart (deploy/helm/ferry): helm lint, and rendered with its defaults
# it is deploy/ object for object (kubectl kustomize; make cluster-bins
# builds kubectl), with values set they reach every place.
test-chart: $(HELM) ## helm lint the chart and check it against deploy/ (kustomize)
	$(HELM) lint --strict deploy/helm/ferry
	HELM=$(HELM) $(GOTEST) -tags chart -count=1 -v ./tests/chart/ 2>&1 | tests/scripts/summarize-go-test.sh

$(TOOLS)/csi-sanity:
	GOBIN=$(TOOLS) go install github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@$(CSI_SANITY_VERSION)

sanity: build $(TOOLS)/csi-sanity zfs-up ## csi-sanity against ferry on a real ZFS pool (file-backed)
	tests/sanity/run.sh $(BIN)/ferry $(TOOLS)/csi-sanity

demo: build zfs-up ## the main job: a file-backed pool, the driver, and a CSI client walking a volume's life
	go run ./tests/demo -ferry $(BIN)/ferry

demo-cluster: cluster-up cluster-deploy ## the demo's second act on the local cluster (brought up if needed, left up): a replicated claim, a pod writing, kubectl get rv, the pod moved to the other copy's node with its data, the move's time
	go run ./tests/demo/cluster

# The OpenZFS lane (tests/openzfs/README.md): real OpenZFS in qemu guests.
OPENZFS_SERIES ?= 2.3 2.1
.PHONY: openzfs-image test-openzfs
openzfs-image: ## build (or reuse) the OpenZFS guest images (2.3, 2.1) (Debian 12, DKMS), cached in ~/.cache/ferry/openzfs
	for s in $(OPENZFS_SERIES); do tests/openzfs/image.sh $$s; done
test-openzfs: ## the OpenZFS lane: the contract suite, fences, csi-sanity, CSI node and replication tests on real OpenZFS 2.3 and 2.1 in qemu guests (2.1: the short plan)
	tests/openzfs/lane.sh $(OPENZFS_SERIES)

REPLICATION_TESTS = FERRY_BIN=$(BIN)/ferry $(1) $(GOTEST) -tags replication -count=1 -timeout 20m -v ./tests/replication/ 2>&1 | tests/scripts/summarize-go-test.sh

test-replication: build zfs-up ## replication end to end: 3 pools, 3 volume managers per volume, mTLS over 127.0.0.1
	$(call REPLICATION_TESTS)

test-watchdog: ## a primary's watchdog with no daemon, as root: the permit runs out, a writer on the volume through a pod's mount is killed, the mount covered
	$(GOTEST) -tags watchdog -count=1 -v ./tests/watchdog/

# The same scenarios with every core saturated (BUSY_LOOPS busy loops, two
# for this 2-core machine): waits must follow progress, not timing luck.
BUSY_LOOPS ?= 2
test-replication-loaded: build zfs-up ## test-replication while two busy loops saturate both cores (tests/scripts/busy.sh)
	$(call REPLICATION_TESTS,tests/scripts/busy.sh $(BUSY_LOOPS))

bench-idle: build zfs-up cluster-bins ## what idle replicas cost a node: 200 volume managers on one pool against a real API server, watching vs polling (CPU % of one core, MiB each)
	go run ./tests/bench/idle -ferry $(BIN)/ferry $(BENCH_IDLE_FLAGS)

bench-rpo: build zfs-up cluster-bins ## the loss bound at a 1 s snapshot interval: 10, 50 and 100 volumes written continuously, primaries on one zfs-fuse pool, secondaries on another, a real API server: RPO p50/p99, cost per snapshot
	go run ./tests/bench/rpo -ferry $(BIN)/ferry $(BENCH_RPO_FLAGS)

bench-provision: ## on the running local cluster: 100 Immediate claims at once until Bound (provisioned: PVCs/s), ReplicatedVolume writes per volume per snapshot interval, deletion
	go run ./tests/bench/provision $(BENCH_PROVISION_FLAGS)

bench-move: ## on the running local cluster: a StatefulSet pod with a replicated claim moved to another node 5 times (move: median seconds from the old pod gone until the new one runs there with its data, with its breakdown, and the stop before it)
	go run ./tests/bench/move $(BENCH_MOVE_FLAGS)

bench-transport: ## the peer transport alone (mTLS on loopback, no zfs): MB/s and allocations
	go test -run '^$$' -bench . -benchtime 10x ./adapters/peer

bench-replication: zfs-up ## Ferry's peer transport vs zfs send -> plain TCP -> zfs recv between two network namespaces: per-round ratios, median, interval, ratio
	go run ./tests/bench/replication $(BENCH_REPLICATION_FLAGS)

bench-replication-ssh: zfs-up ## the same, with zfs send | mbuffer | ssh | mbuffer | zfs recv measured alongside (needs mbuffer, ssh, sshd)
	@missing=""; for t in mbuffer ssh ssh-keygen; do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	  [ -x /usr/sbin/sshd ] || command -v sshd >/dev/null || missing="$$missing sshd"; \
	  if [ -n "$$missing" ]; then \
	    echo "bench-replication-ssh: not run: missing$$missing (Debian: apt-get install -y mbuffer openssh-server openssh-client)"; exit 1; fi
	go run ./tests/bench/replication -ssh $(BENCH_REPLICATION_FLAGS)

test: lint-layers vet unit sanity test-replication test-watchdog ## everything CI runs
	@echo "make test: all passed"

clean: ## remove build outputs
	rm -rf $(BIN)

# About 20 s of CPU, spread over every CPU (80 s on two busy cores).
SEEDS ?= 10000
STEPS ?= 1500
FIRST ?= 1
sim: ## the replica simulation with long seeds on every CPU (SEEDS=10000 STEPS=1500 FIRST=1)
	go test -count=1 -run '^TestSimulation$$' ./domain/replica -sim.seeds=$(SEEDS) -sim.steps=$(STEPS) -sim.first=$(FIRST)

test-kubeapi: cluster-bins ## the Kubernetes adapters' contracts against a real etcd and kube-apiserver on loopback (no cluster needed; builds them once)
	$(GOTEST) -tags apiserver -count=1 -timeout 10m -v ./tests/kubeapi/ 2>&1 | tests/scripts/summarize-go-test.sh

# The cluster tests of replicated volumes (test-k8s) and the others
# (test-cluster) share one package; each target runs its half.
K8S_TESTS := ^Test(AReplicatedClaim|Draining|RestartingTheDaemon|AStatefulSetPodMoves|ADeploymentWithRecreate|TwoPodsWanting)
CLUSTER_GOTEST = KUBECONFIG=$${KUBECONFIG:-/var/lib/ferry-e2e/kubeconfig} $(GOTEST) -tags cluster -count=1 -timeout 30m -v $(1) ./tests/cluster/e2e/ 2>&1 | tests/scripts/summarize-go-test.sh
test-cluster: build ## Ferry's checks on the running local cluster (make cluster-up cluster-deploy first): data outlives pods, snapshots restore, online growth, a second writer refused, RBAC
	$(call CLUSTER_GOTEST,-skip '$(K8S_TESTS)|$(NODE_LOSS_TESTS)|$(UNINSTALL_TESTS)|$(UPGRADE_TESTS)')

# Ferry rolled from the previous commit's image to this one while a pod
# writes (tests/cluster/e2e-upgrade.sh builds the earlier image; from
# another commit: FERRY_UPGRADE_FROM=<rev>). Prints "upgrade: N.N s, pause
# max N.N s, lost writes: N".
UPGRADE_TESTS := ^TestUpgrade
e2e-upgrade: build ## on the running local cluster: Ferry rolled from the previous commit's image to this one under a writer: no takeover, no fence, no pod restarted, no write lost, every volume manager on the new image
	tests/cluster/e2e-upgrade.sh

# The driver uninstalled and installed again on the running cluster: it
# deletes ferry-system, so it runs alone, after the others.
UNINSTALL_TESTS := ^TestUninstall
e2e-uninstall: $(HELM) ## on the running local cluster: helm upgrade and uninstall keep every copy, ReplicatedVolume and the CA; the kustomize deployment brings the volume back with its data, no transfer; kubectl delete -k deploy/ keeps them, and the chart installed again brings it back
	$(call CLUSTER_GOTEST,-run '$(UNINSTALL_TESTS)')

# Node loss (tests/cluster/node.sh kills, cuts off, pauses or isolates the
# primary's node): prints "failover node-loss: N.N s" and "lost writes: N".
# Every TestNodeLoss* runs: killed, cut off, paused and resumed, declared
# out of service, the API server stopped, a copy syncing while the primary
# is cut off from the API server (three nodes), a cut shorter than the
# takeover. make e2e's two-node phase runs only the kill and the cut.
NODE_LOSS_TESTS := ^TestNodeLoss
e2e-node-loss: ## on the running local cluster: the primary's node killed, cut off, paused, declared out of service; the pod runs with its data on the other copy's node (failover node-loss: N.N s, lost writes: N), the node returns and rejoins; a copy synced during a cut never takes over; a short blip gives the pod back
	$(call CLUSTER_GOTEST,-run '$(NODE_LOSS_TESTS)')

e2e: build ## node loss on the local cluster, three nodes then two (brought up as needed, left down): failover node-loss: N.N s and lost writes: N for each
	tests/cluster/e2e-node-loss.sh

test-k8s: ## replicated volumes on the running local cluster: ReplicatedVolume, ReplicaSet, budget, copies by checksum, scaling, drains (prints rebuild: MB/s), pods moving with their data (StatefulSet, Deployment, drain of the primary), deletion leaving nothing
	$(call CLUSTER_GOTEST,-run '$(K8S_TESTS)')
