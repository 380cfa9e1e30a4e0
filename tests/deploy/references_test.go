package deploy_test

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ferry-csi/ferry/domain/volume"
)

// allowedStorageClassParameters are the StorageClass parameter keys a Ferry
// StorageClass may set. volume.ParseParams also accepts the
// csi.storage.k8s.io/* keys that the external-provisioner adds itself with
// --extra-create-metadata; in a StorageClass those keys name CSI secrets,
// which Ferry must never be given, so they are not allowed here.
var allowedStorageClassParameters = []string{"defaultReplicationFactor", "pool", "snapshotInterval", "compression", "recordsize", "atime"}

// ---------------------------------------------------------------------------
// 4. Consistency

func TestTheDaemonSetAndTheDeploymentRunAsAServiceAccountThatIsDefinedAndBound(t *testing.T) {
	m := mustLoad(t)
	for _, w := range mustWorkloads(t, m) {
		t.Run(w.gvk.Kind+" "+w.name(), func(t *testing.T) {
			sa := w.template.Spec.ServiceAccountName
			if sa == "" {
				t.Fatalf("%s sets no spec.template.spec.serviceAccountName, so it runs as %s/default, which no role is meant for", w.object, w.namespace)
			}
			var defined []string
			found := false
			for _, s := range typed[*corev1.ServiceAccount](m) {
				o := m.where(s)
				defined = append(defined, m.namespaceOf(o)+"/"+s.Name)
				if s.Name == sa && m.namespaceOf(o) == w.namespace {
					found = true
				}
			}
			if !found {
				t.Errorf("%s runs as ServiceAccount %s/%s, which the manifests do not define (they define %q)", w.object, w.namespace, sa, defined)
			}
			roles, errs := m.rolesOf(w.namespace, sa)
			for _, err := range errs {
				t.Errorf("ServiceAccount %s/%s of %s is bound by %v", w.namespace, sa, w.object, err)
			}
			if len(roles) == 0 {
				t.Errorf("no ClusterRoleBinding or RoleBinding binds ServiceAccount %s/%s (of %s) to a role defined in the manifests", w.namespace, sa, w.object)
			}
			for _, r := range roles {
				t.Logf("ServiceAccount %s/%s is bound to %s", w.namespace, sa, r.object)
			}
		})
	}
}

func TestEveryRoleBindingRefersToARoleDefinedInTheManifests(t *testing.T) {
	m := mustLoad(t)
	for _, b := range m.bindings() {
		if _, err := m.boundRole(b); err != nil {
			t.Error(err)
		}
	}
}

func TestEveryWorkloadSelectorMatchesItsPodTemplateLabels(t *testing.T) {
	m := mustLoad(t)
	for _, w := range mustWorkloads(t, m) {
		if w.selector == nil {
			t.Errorf("%s has no spec.selector", w.object)
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(w.selector)
		switch {
		case err != nil:
			t.Errorf("%s: spec.selector is invalid: %v", w.object, err)
		case sel.Empty():
			t.Errorf("%s: spec.selector is empty and would select every pod in %s", w.object, w.namespace)
		case !sel.Matches(labels.Set(w.template.Labels)):
			t.Errorf("%s: spec.selector %q does not match the pod template labels %q, so the API server rejects it (selector does not match template labels)", w.object, sel.String(), labels.Set(w.template.Labels).String())
		}
	}
}

func TestTheFerryContainerRunsItsModeWithOnlyFlagsTheBinaryAccepts(t *testing.T) {
	m := mustLoad(t)
	for _, w := range mustWorkloads(t, m) {
		if w.mode == "" {
			continue // not a ferry workload
		}
		t.Run(w.gvk.Kind+" "+w.name(), func(t *testing.T) {
			c, ok := container(w, "ferry")
			if !ok {
				t.Fatalf("%s has no container named ferry", w.object)
			}
			argv, err := ferryArgv(c)
			if err != nil {
				t.Fatalf("%s container ferry: %v", w.object, err)
			}
			for _, p := range checkFerryArgs(argv, w.mode, ferryFlags(t, w.mode), c.Env) {
				t.Errorf("%s container ferry %s", w.object, p)
			}
		})
	}
}

func TestTheDriverNameIsTheSameEverywhere(t *testing.T) {
	m := mustLoad(t)
	drivers := typed[*storagev1.CSIDriver](m)
	if len(drivers) != 1 {
		t.Fatalf("the manifests define %d CSIDrivers, want exactly 1 (%s)", len(drivers), driverName)
	}
	name := drivers[0].Name
	if name != driverName {
		t.Errorf("%s is named %q, want %q", m.where(drivers[0]), name, driverName)
	}
	classes := typed[*storagev1.StorageClass](m)
	if len(classes) == 0 {
		t.Error("the manifests define no StorageClass")
	}
	for _, sc := range classes {
		if sc.Provisioner != name {
			t.Errorf("%s has provisioner %q, but the CSIDriver is %q, so no Ferry provisioner serves it", m.where(sc), sc.Provisioner, name)
		}
	}
	var snapshotClasses int
	for _, o := range m.objects {
		if o.vsc == nil {
			continue
		}
		snapshotClasses++
		if o.vsc.Driver != name {
			t.Errorf("%s has driver %q, but the CSIDriver is %q, so no Ferry snapshotter serves it", o, o.vsc.Driver, name)
		}
	}
	if snapshotClasses == 0 {
		t.Error("the manifests define no VolumeSnapshotClass")
	}
	// The binary serves the name it is given with --driver-name, or its
	// default.
	for _, w := range mustWorkloads(t, m) {
		c, ok := container(w, "ferry")
		if !ok {
			continue // reported by TestTheFerryContainerRunsItsModeWithOnlyFlagsTheBinaryAccepts
		}
		argv, err := ferryArgv(c)
		if err != nil {
			continue
		}
		served, passed := flagValue(argv, "driver-name")
		if !passed {
			served = ferryFlags(t, w.mode)["driver-name"].def
		}
		if served != name {
			t.Errorf("%s container ferry serves the driver name %q (--driver-name), but the CSIDriver is %q", w.object, served, name)
		}
	}
}

func TestTheStorageClassSetsOnlyParametersTheDriverAllows(t *testing.T) {
	m := mustLoad(t)
	for _, sc := range typed[*storagev1.StorageClass](m) {
		o := m.where(sc)
		keys := make([]string, 0, len(sc.Parameters))
		for k := range sc.Parameters {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !slices.Contains(allowedStorageClassParameters, k) {
				t.Errorf("%s sets parameters.%s, which is not a Ferry StorageClass parameter (allowed: %s)", o, k, strings.Join(allowedStorageClassParameters, ", "))
			}
		}
		if _, err := volume.ParseParams(sc.Parameters); err != nil {
			t.Errorf("%s: the driver refuses its parameters: volume.ParseParams: %v", o, err)
		}
	}
}

// Every image the manifests name is one this project builds
// (deploy/images/build.sh, `make images`): ferry itself and the
// kubernetes-csi sidecars built from the Go module proxy, under the one
// qualified registry path ghcr.io/ferry-csi/, with a tag.
func TestEveryImageIsOneThisProjectBuilds(t *testing.T) {
	m := mustLoad(t)
	built := regexp.MustCompile(`^ghcr\.io/ferry-csi/(ferry|csi-provisioner|csi-resizer|csi-snapshotter|snapshot-controller):[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
	for _, w := range m.workloads() {
		for _, c := range append(w.template.Spec.InitContainers, w.template.Spec.Containers...) {
			if !built.MatchString(c.Image) {
				t.Errorf("%s container %s runs image %q, which this project does not build", w.object, c.Name, c.Image)
			}
		}
	}
}
