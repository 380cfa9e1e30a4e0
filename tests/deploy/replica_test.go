package deploy_test

import (
	"path"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	replicapods "github.com/ferry-csi/ferry/adapters/kube/workload"
)

// ---------------------------------------------------------------------------
// 7. The replica pods' template (deploy/replica.yaml): flags the binary
// accepts, the control directory the daemon uses, and what the watchdog's
// fence needs

// replicaTemplate decodes the template the node daemon reads
// (--replica-template) from the ConfigMap, strictly, as the daemon does.
func replicaTemplate(t *testing.T, m *manifests) replicapods.Template {
	t.Helper()
	for _, cm := range typed[*corev1.ConfigMap](m) {
		if cm.Name != "ferry-replica-template" {
			continue
		}
		var tpl replicapods.Template
		if err := yaml.UnmarshalStrict([]byte(cm.Data["template.yaml"]), &tpl); err != nil {
			t.Fatalf("%s: template.yaml: %v", m.where(cm), err)
		}
		return tpl
	}
	t.Fatal("no ConfigMap ferry-replica-template (the replica pods' template)")
	return replicapods.Template{}
}

// templateHostPath is the host path mounted at dir in the template's pods.
func templateHostPath(tpl replicapods.Template, dir string) (string, corev1.VolumeMount, bool) {
	for _, vm := range tpl.Mounts {
		if path.Clean(vm.MountPath) != path.Clean(dir) {
			continue
		}
		for _, v := range tpl.Volumes {
			if v.Name == vm.Name && v.HostPath != nil {
				return path.Clean(v.HostPath.Path), vm, true
			}
		}
	}
	return "", corev1.VolumeMount{}, false
}

func TestTheReplicaTemplatePassesOnlyFlagsTheVolumeManagerAccepts(t *testing.T) {
	m := mustLoad(t)
	tpl := replicaTemplate(t, m)
	// What the daemon puts before the template's args (adapters/kube/workload).
	argv := append([]string{"volume-manager", "--volume=v", "--node-id=$(NODE_NAME)", "--cluster-state=kubernetes", "--probe-listen=:9808"}, tpl.Args...)
	env := []corev1.EnvVar{{Name: "NODE_NAME"}, {Name: "POD_NAMESPACE"}}
	for _, p := range checkFerryArgs(argv, "volume-manager", ferryFlags(t, "volume-manager"), env) {
		t.Errorf("the replica template: %s", p)
	}
}

// The volume managers' --control-dir is the host directory of the
// daemon's --replica-control-dir: their sockets, and the node's write
// permit their watchdogs read. The watchdog is on (--watchdog: fencing
// does not hinge on the daemon), and the replica pod runs in the host's
// pid namespace (its fence finds the pods' processes) and sees the
// datasets' mounts where the store mounts them (where it finds the
// filesystem's device).
func TestTheReplicaPodsShareTheDaemonsControlDirectoryAndWhatTheirWatchdogNeeds(t *testing.T) {
	m := mustLoad(t)
	tpl := replicaTemplate(t, m)
	var daemon workload
	for _, w := range mustWorkloads(t, m) {
		if w.mode == "daemon" {
			daemon = w
		}
	}
	c, ok := container(daemon, "ferry")
	if !ok {
		t.Fatal("the node DaemonSet has no container ferry")
	}
	argv, err := ferryArgv(c)
	if err != nil {
		t.Fatal(err)
	}
	hostOf := func(dir string) string {
		vol, rel, ok := onVolume(c, dir)
		if v, found := volumeNamed(daemon, vol); ok && found && v.HostPath != nil {
			return path.Join(v.HostPath.Path, rel)
		}
		return ""
	}
	ctl, ok := flagValue(argv, "replica-control-dir")
	if !ok {
		ctl = ferryFlags(t, "daemon")["replica-control-dir"].def
	}
	vmCtl, ok := flagValue(tpl.Args, "control-dir")
	if !ok {
		t.Fatal("the replica template passes no --control-dir: publish and unpublish cannot reach the volume managers")
	}
	if host, _, ok := templateHostPath(tpl, vmCtl); !ok || host != hostOf(ctl) || host == "" {
		t.Errorf("the volume managers' --control-dir %s is the host's %q, the daemon's --replica-control-dir %s the host's %q", vmCtl, host, ctl, hostOf(ctl))
	}
	if _, on := flagValue(tpl.Args, "watchdog"); !on {
		t.Error("the replica template does not pass --watchdog: with the daemon down, nothing fences a primary")
	}
	if !tpl.HostPID {
		t.Error("--watchdog without hostPID: the fence would see no pod's process")
	}
	mounts := false
	for _, vm := range tpl.Mounts {
		if vm.Name == "dataset-mounts" && vm.MountPropagation != nil && *vm.MountPropagation == corev1.MountPropagationBidirectional {
			mounts = true
		}
	}
	if !mounts {
		t.Error("the replica pods do not see the datasets' mounts (dataset-mounts, Bidirectional): the watchdog would find no device to fence")
	}
}
