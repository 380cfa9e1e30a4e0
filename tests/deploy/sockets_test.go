package deploy_test

import (
	"fmt"
	"net/url"
	"path"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// ---------------------------------------------------------------------------
// 5. The socket kubelet is told about is the one the node plugin serves

func TestTheNodePluginRegistersTheSocketItServesInTheKubeletsRegistry(t *testing.T) {
	m := mustLoad(t)
	for _, w := range mustWorkloads(t, m) {
		if w.mode != "daemon" {
			continue
		}
		if _, ok := container(w, "node-driver-registrar"); ok {
			t.Errorf("%s runs node-driver-registrar, an image this project cannot build: ferry daemon registers itself", w.object)
		}
		c, ok := container(w, "ferry")
		if !ok {
			continue
		}
		argv, err := ferryArgv(c)
		if err != nil {
			continue
		}
		kubeletDir, ok := flagValue(argv, "kubelet-dir")
		if !ok {
			kubeletDir = ferryFlags(t, w.mode)["kubelet-dir"].def
		}
		driver, ok := flagValue(argv, "driver-name")
		if !ok {
			driver = ferryFlags(t, w.mode)["driver-name"].def
		}
		regPath, ok := flagValue(argv, "kubelet-registration-path")
		if !ok {
			regPath = path.Join(kubeletDir, "plugins", driver, "csi.sock")
		}
		regDir, ok := flagValue(argv, "registration-dir")
		if !ok {
			regDir = path.Join(kubeletDir, "plugins_registry")
		}
		if regDir == "none" {
			t.Errorf("%s: the node plugin does not register with the kubelet (--registration-dir=none)", w.object)
			continue
		}
		// The registry directory is the host's, at the kubelet's path.
		vol, rel, ok := onVolume(c, regDir)
		if rv, found := volumeNamed(w, vol); !ok || !found || rv.HostPath == nil || path.Join(rv.HostPath.Path, rel) != path.Join(kubeletDir, "plugins_registry") {
			t.Errorf("%s: --registration-dir %s is not the host's %s/plugins_registry", w.object, regDir, kubeletDir)
		}
		v, ok := volumeNamed(w, "plugin-dir")
		if !ok || v.HostPath == nil {
			t.Errorf("%s has no hostPath volume named plugin-dir", w.object)
			continue
		}
		hostDir := path.Clean(v.HostPath.Path)
		if dir := path.Dir(path.Clean(regPath)); dir != hostDir {
			t.Errorf("%s: --kubelet-registration-path=%s names a socket in %s, but the plugin-dir volume is hostPath %s; kubelet would dial a socket nobody serves. Make them the same directory", w.object, regPath, dir, hostDir)
		}
		// And the socket the ferry container serves is that file.
		sock, err := ferryEndpoint(t, w, argv)
		if err != nil {
			t.Error(err)
			continue
		}
		vol, rel, ok = onVolume(c, sock)
		if !ok || vol != "plugin-dir" {
			t.Errorf("%s: container ferry serves %s, which is not on the plugin-dir volume (it is on %q)", w.object, sock, vol)
			continue
		}
		if onHost := path.Join(hostDir, rel); onHost != path.Clean(regPath) {
			t.Errorf("%s: container ferry serves %s, which is %s on the host, but registers --kubelet-registration-path=%s", w.object, sock, onHost, regPath)
		}
	}
}

// ferryEndpoint is the path of the unix socket the ferry container serves.
func ferryEndpoint(t *testing.T, w workload, argv []string) (string, error) {
	endpoint, ok := flagValue(argv, "csi-endpoint")
	if !ok {
		endpoint = ferryFlags(t, w.mode)["csi-endpoint"].def
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "unix" || !path.IsAbs(u.Path) {
		return "", fmt.Errorf("%s container ferry: --csi-endpoint=%s is not unix:///absolute/path", w.object, endpoint)
	}
	return u.Path, nil
}

func TestEverySidecarDialsTheSocketTheFerryContainerServes(t *testing.T) {
	m := mustLoad(t)
	for _, w := range mustWorkloads(t, m) {
		c, ok := container(w, "ferry")
		if !ok {
			continue // reported by TestTheFerryContainerRunsItsModeWithOnlyFlagsTheBinaryAccepts
		}
		argv, err := ferryArgv(c)
		if err != nil {
			continue
		}
		sock, err := ferryEndpoint(t, w, argv)
		if err != nil {
			t.Error(err)
			continue
		}
		// The node plugin's sidecars dial the socket it serves for them
		// alone, on a volume no other pod shares: during a surge the new
		// pod's sidecars must wait for their own daemon (a sidecar that
		// dialled the old daemon's socket exits when it stops, and an
		// old pod unready for that moment is deleted by the DaemonSet at
		// once, leaving the node without a daemon for the new pod's pull).
		if ep, ok := flagValue(argv, "csi-sidecar-endpoint"); ok {
			u, err := url.Parse(ep)
			if err != nil || u.Scheme != "unix" || !path.IsAbs(u.Path) {
				t.Errorf("%s container ferry: --csi-sidecar-endpoint=%s is not unix:///absolute/path", w.object, ep)
				continue
			}
			sock = u.Path
		}
		vol, rel, ok := onVolume(c, sock)
		if !ok {
			t.Errorf("%s: container ferry serves %s on no volume, so no sidecar can reach it", w.object, sock)
			continue
		}
		if v, found := volumeNamed(w, vol); w.mode == "daemon" && hasSidecars(w) && (!found || v.EmptyDir == nil) {
			t.Errorf("%s: the node plugin's sidecars dial %s on volume %q, which is no emptyDir: a surge's new pod's sidecars would dial the old daemon and exit when it stops (serve them --csi-sidecar-endpoint on an emptyDir)", w.object, sock, vol)
		}
		sidecars := 0
		for _, s := range w.template.Spec.Containers {
			addr, ok := flagValue(s.Args, "csi-address")
			if s.Name == "ferry" || !ok {
				continue
			}
			sidecars++
			addr = strings.TrimPrefix(addr, "unix://")
			svol, srel, ok := onVolume(s, addr)
			if !ok || svol != vol || srel != rel {
				t.Errorf("%s: container %s dials --csi-address=%s (volume %q, path %q), but container ferry serves %s (volume %q, path %q)", w.object, s.Name, addr, svol, srel, sock, vol, rel)
			}
		}
		if sidecars == 0 && w.mode != "daemon" { // the node plugin has no sidecar: it registers itself
			t.Errorf("%s: no sidecar container passes --csi-address", w.object)
		}
	}
}

// hasSidecars says whether a container other than ferry dials a CSI socket.
func hasSidecars(w workload) bool {
	for _, s := range w.template.Spec.Containers {
		if _, ok := flagValue(s.Args, "csi-address"); ok && s.Name != "ferry" {
			return true
		}
	}
	return false
}

func volumeNamed(w workload, name string) (corev1.Volume, bool) {
	for _, v := range w.template.Spec.Volumes {
		if v.Name == name {
			return v, true
		}
	}
	return corev1.Volume{}, false
}

// onVolume resolves an absolute path inside container c to the volume mounted
// over it and the path relative to that volume's root.
func onVolume(c corev1.Container, p string) (vol, rel string, ok bool) {
	p = path.Clean(p)
	best := -1
	for _, vm := range c.VolumeMounts {
		mp := path.Clean(vm.MountPath)
		if p != mp && !strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/") {
			continue
		}
		if len(mp) > best {
			best = len(mp)
			vol = vm.Name
			rel = path.Join(vm.SubPath, strings.TrimPrefix(strings.TrimPrefix(p, mp), "/"))
		}
	}
	return vol, rel, best >= 0
}

// ---------------------------------------------------------------------------
// 6. The pod target paths kubelet sends lie below the node plugin's
// --kubelet-dir, at the same path inside the container as on the host

func TestThePodsDirectoryIsBelowKubeletDirAtTheSamePathAsOnTheHost(t *testing.T) {
	m := mustLoad(t)
	for _, w := range mustWorkloads(t, m) {
		if w.mode != "daemon" {
			continue
		}
		c, ok := container(w, "ferry")
		if !ok {
			continue
		}
		argv, err := ferryArgv(c)
		if err != nil {
			continue
		}
		kubeletDir, ok := flagValue(argv, "kubelet-dir")
		if !ok {
			kubeletDir = ferryFlags(t, w.mode)["kubelet-dir"].def
		}
		v, ok := volumeNamed(w, "pods-mount-dir")
		if !ok || v.HostPath == nil {
			t.Errorf("%s has no hostPath volume named pods-mount-dir: pods' target paths are not reachable", w.object)
			continue
		}
		hostPods := path.Clean(v.HostPath.Path)
		for _, vm := range c.VolumeMounts {
			if vm.Name != "pods-mount-dir" {
				continue
			}
			if path.Clean(vm.MountPath) != hostPods {
				t.Errorf("%s: container ferry mounts the pods directory at %s but it is %s on the host; kubelet's target paths would name other directories", w.object, vm.MountPath, hostPods)
			}
			if !strings.HasPrefix(hostPods, path.Clean(kubeletDir)+"/") {
				t.Errorf("%s: the pods directory %s is not below --kubelet-dir=%s; every NodePublishVolume would be refused", w.object, hostPods, kubeletDir)
			}
		}
	}
}
