package main

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/ferry-csi/ferry/adapters/mount"
	"github.com/ferry-csi/ferry/app/provision"
	"github.com/ferry-csi/ferry/app/publish"
	"github.com/ferry-csi/ferry/ports"
	"go.uber.org/fx"
)

// TestMain lets a test run this test binary as ferry itself.
func TestMain(m *testing.M) {
	if os.Getenv("FERRY_TEST_AS_FERRY") != "" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestAHostRootThatIsNoDirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/f"
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{"host", "/", dir + "/../" + dir[1:], dir + "/missing", file} {
		if err := checkHostRoot(root); err == nil {
			t.Errorf("--host-root=%s accepted", root)
		}
	}
	if err := checkHostRoot(dir); err != nil {
		t.Errorf("--host-root=%s: %v", dir, err)
	}
}

// The kubelet's directory below the host root would hide every pod's
// mount from the mount tables: refused.
func TestAKubeletDirBelowTheHostRootIsRefused(t *testing.T) {
	root := t.TempDir()
	for _, m := range modes {
		if m.name != "daemon" {
			continue
		}
		for kubelet, ok := range map[string]bool{root + "/var/lib/kubelet": false, root: false, root + "-other/kubelet": true} {
			fs := flag.NewFlagSet(m.name, flag.ContinueOnError)
			o := m.flags(fs)
			if err := fs.Parse([]string{"--node-id=n1", "--store=memory", "--host-root=" + root, "--kubelet-dir=" + kubelet, "--registration-dir=none"}); err != nil {
				t.Fatal(err)
			}
			if err := o.validate(m.name); (err == nil) != ok || err != nil && !strings.Contains(err.Error(), "lies below --host-root") {
				t.Errorf("--kubelet-dir=%s below --host-root=%s: %v", kubelet, root, err)
			}
		}
	}
}

func TestEveryModeWiresUpWithFx(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			fs := flag.NewFlagSet(m.name, flag.ContinueOnError)
			o := m.flags(fs)
			args := []string{"--node-id=n1", "--store=memory", "--memory-dir=" + t.TempDir()}
			if m.name == "volume-manager" {
				args = append(args, "--volume=v1")
			}
			if m.name == "signer" { // no node, no store: the CA's files and the API
				args = []string{"--ca-cert=/ca/tls.crt", "--ca-key=/ca/tls.key"}
			}
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			if err := o.validate(m.name); err != nil {
				t.Fatal(err)
			}
			if err := fx.ValidateApp(m.app(o)); err != nil {
				t.Fatalf("fx graph of %s: %v", m.name, err)
			}
		})
	}
}

// The volume manager's watchdog wires up with its permit, fencer and
// mount table.
func TestTheVolumeManagersWatchdogWiresUpWithFx(t *testing.T) {
	for _, m := range modes {
		if m.name != "volume-manager" {
			continue
		}
		fs := flag.NewFlagSet(m.name, flag.ContinueOnError)
		o := m.flags(fs)
		if err := fs.Parse([]string{"--node-id=n1", "--store=memory", "--memory-dir=" + t.TempDir(), "--volume=v1", "--control-dir=" + t.TempDir(), "--watchdog"}); err != nil {
			t.Fatal(err)
		}
		if err := o.validate(m.name); err != nil {
			t.Fatal(err)
		}
		if err := fx.ValidateApp(m.app(o)); err != nil {
			t.Fatalf("fx graph: %v", err)
		}
		return
	}
	t.Fatal("no volume-manager mode")
}

func TestHelpListsEveryModeAndEveryFlagWithItsDefault(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--help"}, &out, &errOut); code != 0 {
		t.Fatalf("ferry --help exited %d: %s", code, errOut.String())
	}
	for _, m := range modes {
		if !strings.Contains(out.String(), m.name) {
			t.Errorf("ferry --help does not mention mode %s", m.name)
		}
	}
	for _, m := range modes {
		out.Reset()
		if code := run([]string{m.name, "--help"}, &out, &errOut); code != 0 {
			t.Fatalf("ferry %s --help exited %d", m.name, code)
		}
		fs := flag.NewFlagSet(m.name, flag.ContinueOnError)
		m.flags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(out.String(), "-"+f.Name) {
				t.Errorf("ferry %s --help does not list -%s", m.name, f.Name)
			}
			if f.DefValue != "" && !strings.Contains(out.String(), f.DefValue) {
				t.Errorf("ferry %s --help does not show the default %q of -%s", m.name, f.DefValue, f.Name)
			}
		})
	}
}

func TestBadInvocationsExitTwoWithAReason(t *testing.T) {
	cases := [][]string{{}, {"bogus"}, {"daemon"}, {"daemon", "--node-id=n", "--store=nfs"}, {"volume-manager", "--node-id=n"}, {"daemon", "--node-id=n", "extra"},
		{"volume-manager", "--node-id=n", "--volume=v", "--max-transfer-rate=10X"},
		{"volume-manager", "--node-id=n", "--volume=v", "--max-transfer-rate=1k"},
		{"volume-manager", "--node-id=n", "--volume=v", "--cluster-state=etcd:/x"},
		{"daemon", "--node-id=n", "--peer-advertise=10.0.0.1:7443", "--peer-listen=:7443"},
		{"daemon", "--node-id=n", "--cluster-state=kubernetes", "--peer-listen=:7443", "--peer-advertise=10.0.0.1"},
		{"daemon", "--node-id=n", "--cluster-state=file:/tmp/x"},
		{"volume-manager", "--node-id=n", "--volume=v", "--watchdog"},
		{"volume-manager", "--node-id=n", "--volume=v", "--control-dir=/tmp/x", "--watchdog", "--watchdog-poll=0s"}}
	for _, args := range cases {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 || errOut.Len() == 0 {
			t.Errorf("ferry %v: exit %d, stderr %q; want 2 with a reason", args, code, errOut.String())
		}
	}
}

// --cluster-state kubernetes builds the process's one client set from
// --kubeconfig (or the pod's credentials), the ReplicatedVolume store on
// it, and loads the replica template once; a kubeconfig or template that
// does not exist is an error at start, not a crash later.
func TestClusterStateKubernetesNeedsAKubeconfigOrThePodsCredentials(t *testing.T) {
	dir := t.TempDir()
	kc := dir + "/kubeconfig"
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := KubeOptions{ClusterState: "kubernetes", Kubeconfig: kc}
	api, err := newKubeAPI(o, "", replicaSettings{}, "volume-manager")
	if err != nil || api == nil {
		t.Fatalf("with a kubeconfig: %v", err)
	}
	if s, err := clusterState(o, api); err != nil || s == nil {
		t.Fatalf("the state store on the client set: %v", err)
	}
	if _, err := newKubeAPI(KubeOptions{ClusterState: "kubernetes", Kubeconfig: dir + "/missing"}, "", replicaSettings{}, "volume-manager"); err == nil {
		t.Fatal("a missing kubeconfig was accepted")
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := newKubeAPI(KubeOptions{ClusterState: "kubernetes"}, "", replicaSettings{}, "volume-manager"); err == nil {
		t.Fatal("no kubeconfig outside a pod was accepted")
	}
	if _, err := newKubeAPI(KubeOptions{ClusterState: "kubernetes", Kubeconfig: kc}, dir+"/missing.yaml", replicaSettings{AllowedLag: 1}, "daemon"); err == nil {
		t.Fatal("a missing replica template was accepted")
	}
	if api, err := newKubeAPI(KubeOptions{ClusterState: "file:" + dir}, "", replicaSettings{}, "volume-manager"); err != nil || api != nil {
		t.Fatalf("a file cluster state built a Kubernetes client: %v, %v", api, err)
	}
}

// One process, one table of per-volume locks: a daemon serving the
// controller too never deletes a volume while it publishes it.
func TestTheControllerAndTheNodeOfAProcessShareTheirVolumeLocks(t *testing.T) {
	o := &Options{LogOptions: LogOptions{LogLevel: "error", LogFormat: "json"}, NodeOptions: NodeOptions{NodeID: "n1"}}
	var pc provision.Config
	var nc publish.Config
	app := fx.New(base(o, "daemon"), fx.Populate(&pc, &nc), fx.NopLogger)
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	if pc.Locks == nil || pc.Locks != nc.Locks {
		t.Fatalf("the controller's locks %p, the node's %p: want one shared table", pc.Locks, nc.Locks)
	}
}

// The node plugin's mount checks (publish's other targets, release on the
// last unpublish, the rediscovery, the fence's table) leave out the views
// below --host-root: the mounter and the mount table get it.
func TestTheDaemonsMountTablesLeaveOutTheHostRoot(t *testing.T) {
	for _, m := range modes {
		if m.name != "daemon" {
			continue
		}
		fs := flag.NewFlagSet(m.name, flag.ContinueOnError)
		o := m.flags(fs)
		root := t.TempDir()
		if err := fs.Parse([]string{"--node-id=n1", "--store=memory", "--memory-dir=" + t.TempDir(), "--host-root=" + root,
			"--kubelet-dir=" + t.TempDir(), "--registration-dir=none"}); err != nil {
			t.Fatal(err)
		}
		if err := o.validate(m.name); err != nil {
			t.Fatal(err)
		}
		var mounter ports.Mounter
		var table ports.MountTable
		app := fx.New(m.app(o), fx.Populate(&mounter, &table), fx.NopLogger)
		if err := app.Err(); err != nil {
			t.Fatal(err)
		}
		if l, ok := mounter.(mount.Linux); !ok || l.Table.HostRoot != root {
			t.Errorf("the mounter is %#v, want a mount.Linux whose table leaves out %s", mounter, root)
		}
		if tb, ok := table.(mount.Table); !ok || tb.HostRoot != root {
			t.Errorf("the mount table is %#v, want one that leaves out %s", table, root)
		}
		return
	}
	t.Fatal("no daemon mode")
}

func TestAMetricsAddressThatIsNoneIsRefused(t *testing.T) {
	for _, m := range modes {
		if m.name != "daemon" {
			continue
		}
		for args, ok := range map[string]bool{"--metrics-listen=9808": false, "--replica-metrics-listen=x": false, "--metrics-listen=:9808": true, "--replica-metrics-listen=127.0.0.1:9809": true} {
			fs := flag.NewFlagSet(m.name, flag.ContinueOnError)
			o := m.flags(fs)
			if err := fs.Parse([]string{"--node-id=n1", "--store=memory", "--kubelet-dir=" + t.TempDir(), "--registration-dir=none", args}); err != nil {
				t.Fatal(err)
			}
			if err := o.validate(m.name); (err == nil) != ok {
				t.Errorf("%s: %v", args, err)
			}
		}
	}
}
