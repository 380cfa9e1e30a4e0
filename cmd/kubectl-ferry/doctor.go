package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
)

// What doctor looks for: the names deploy/ and the chart give Ferry's
// objects.
const (
	driverName   = "ferry.zfs.csi.io"
	daemonSet    = "ferry-node"
	daemonPort   = "9808" // the daemon's --metrics-listen, when its pod does not say
	peerCASecret = "ferry-peer-ca"
	peerSecret   = "ferry-peer-tls"
	// certWarning: a certificate that expires sooner is reported.
	certWarning = 30 * 24 * time.Hour
	// poolFreeWarning: a pool with less free is reported (as the
	// FerryPoolNearlyFull alert).
	poolFreeWarning = 0.10
)

// admissionPolicies are Ferry's ValidatingAdmissionPolicies; each has a
// binding of the same name.
var admissionPolicies = []string{"ferry-crd-guard", "ferry-node-labels", "ferry-node-pod-deletions", "ferry-replicatedvolumes", "ferry-replicatedvolumes-finalizer"}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// verdict is a check's outcome.
type verdict int

const (
	pass verdict = iota
	warn
	fail
)

func (v verdict) String() string { return [...]string{"OK", "WARN", "FAIL"}[v] }

// finding is one line of the doctor's report.
type finding struct {
	Check  string
	V      verdict
	Detail string
}

// doctorEnv is what doctor reads the cluster with; scrape reads a pod's
// metrics (the API server's pod proxy, in the plugin).
type doctorEnv struct {
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	ns      string
	now     time.Time
	version string // the plugin's
	scrape  func(ctx context.Context, pod corev1.Pod, port string) (string, error)
}

// doctor checks a cluster's Ferry: its CRD, CSIDriver and admission
// policies, the node daemons (on every node they should be, ready, of one
// version), each node's pool (read, healthy, free space), the peer
// certificates' expiry, and the volumes' phases.
func doctor(ctx context.Context, e doctorEnv) []finding {
	var out []finding
	add := func(check string, v verdict, format string, a ...any) {
		out = append(out, finding{check, v, fmt.Sprintf(format, a...)})
	}

	// The ReplicatedVolume CRD, established.
	crd, err := e.dyn.Resource(crdGVR).Get(ctx, rvapi.Resource+"."+rvapi.Group, metav1.GetOptions{})
	switch {
	case err != nil:
		add("crd", fail, "CustomResourceDefinition %s.%s: %v", rvapi.Resource, rvapi.Group, err)
	case !established(crd):
		add("crd", fail, "CustomResourceDefinition %s.%s is not Established", rvapi.Resource, rvapi.Group)
	default:
		add("crd", pass, "%s.%s is established", rvapi.Resource, rvapi.Group)
	}

	if _, err := e.kube.StorageV1().CSIDrivers().Get(ctx, driverName, metav1.GetOptions{}); err != nil {
		add("csidriver", fail, "CSIDriver %s: %v", driverName, err)
	} else {
		add("csidriver", pass, "%s is registered", driverName)
	}

	var missing []string
	for _, name := range admissionPolicies {
		if _, err := e.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{}); err != nil {
			missing = append(missing, "policy "+name+" ("+reason(err)+")")
		}
		if _, err := e.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{}); err != nil {
			missing = append(missing, "binding "+name+" ("+reason(err)+")")
		}
	}
	if len(missing) > 0 {
		add("admission", fail, "missing: %s; without them a node could write what is not its own", strings.Join(missing, ", "))
	} else {
		add("admission", pass, "%d ValidatingAdmissionPolicies and their bindings", len(admissionPolicies))
	}

	out = append(out, e.daemons(ctx)...)
	out = append(out, e.certificates(ctx)...)
	out = append(out, e.volumes(ctx)...)
	return out
}

// daemons checks the node daemons and, through their metrics, their pools.
func (e doctorEnv) daemons(ctx context.Context) []finding {
	var out []finding
	add := func(check string, v verdict, format string, a ...any) {
		out = append(out, finding{check, v, fmt.Sprintf(format, a...)})
	}
	ds, err := e.kube.AppsV1().DaemonSets(e.ns).Get(ctx, daemonSet, metav1.GetOptions{})
	if err != nil {
		add("daemons", fail, "DaemonSet %s/%s: %v", e.ns, daemonSet, err)
		return out
	}
	st := ds.Status
	if st.DesiredNumberScheduled == 0 {
		add("daemons", fail, "no node is selected for the node daemon (its nodeSelector: %v): no node serves Ferry's volumes", ds.Spec.Template.Spec.NodeSelector)
	} else if st.NumberReady < st.DesiredNumberScheduled || st.UpdatedNumberScheduled < st.DesiredNumberScheduled {
		add("daemons", warn, "%d of %d ready, %d of the current template", st.NumberReady, st.DesiredNumberScheduled, st.UpdatedNumberScheduled)
	} else {
		add("daemons", pass, "%d of %d ready, all of the current template", st.NumberReady, st.DesiredNumberScheduled)
	}
	pods, err := e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector)})
	if err != nil {
		add("daemons", warn, "the daemon pods could not be listed: %v; pools are not checked", err)
		return out
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Spec.NodeName < pods.Items[j].Spec.NodeName })
	versions := map[string][]string{} // version -> nodes
	for _, p := range pods.Items {
		node := p.Spec.NodeName
		if p.DeletionTimestamp != nil {
			continue // a daemon going (a roll): its successor answers for the node
		}
		if p.Status.Phase != corev1.PodRunning {
			add("pool "+node, warn, "daemon pod %s is %s: its pool is not checked", p.Name, p.Status.Phase)
			continue
		}
		port := daemonPort
		if v := p.Annotations["prometheus.io/port"]; v != "" {
			port = v
		}
		text, err := e.scrape(ctx, p, port)
		if err != nil {
			add("pool "+node, warn, "the metrics of %s could not be read: %v", p.Name, err)
			continue
		}
		m := parseMetrics(text)
		v := "unknown"
		for _, s := range m["ferry_build_info"] {
			if s.labels["mode"] == "daemon" {
				v = s.labels["version"]
			}
		}
		versions[v] = append(versions[v], node)
		out = append(out, poolFindings(node, m)...)
	}
	if len(versions) > 1 {
		var parts []string
		for v, nodes := range versions {
			parts = append(parts, fmt.Sprintf("%s on %s", v, strings.Join(nodes, ",")))
		}
		sort.Strings(parts)
		add("versions", warn, "the daemons run different versions (a roll under way?): %s", strings.Join(parts, "; "))
	} else {
		for v := range versions {
			add("versions", pass, "every daemon runs %s (this plugin: %s)", v, e.version)
		}
	}
	return out
}

// poolFindings reads one daemon's pool metrics.
func poolFindings(node string, m map[string][]sample) []finding {
	check := "pool " + node
	up, okUp := first(m, "ferry_pool_up")
	if !okUp {
		return []finding{{check, warn, "the daemon reports no pool (a release without metrics?)"}}
	}
	pool := ""
	if s := m["ferry_pool_up"]; len(s) > 0 {
		pool = s[0].labels["pool"]
	}
	if up != 1 {
		return []finding{{check, fail, fmt.Sprintf("pool %s could not be read: zfs fails on %s (zpool status %s)", pool, node, pool)}}
	}
	size, _ := first(m, "ferry_pool_size_bytes")
	avail, _ := first(m, "ferry_pool_available_bytes")
	if size <= 0 {
		return []finding{{check, warn, fmt.Sprintf("pool %s reports no size", pool)}}
	}
	free := avail / size
	detail := fmt.Sprintf("pool %s: %s free of %s (%.0f%%)", pool, size64(avail), size64(size), free*100)
	if free < poolFreeWarning {
		return []finding{{check, warn, detail + ": nearly full, new copies and snapshots will not fit"}}
	}
	return []finding{{check, pass, detail}}
}

func size64(f float64) string { return size(int64(f)) }

// certificates checks the peer CA's and the shared peer certificate's
// expiry (the Secrets deploy/ and the chart make; when they cannot be
// read, it says so).
func (e doctorEnv) certificates(ctx context.Context) []finding {
	var out []finding
	for _, name := range []string{peerCASecret, peerSecret} {
		check := "certificate " + name
		s, err := e.kube.CoreV1().Secrets(e.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // this installation makes it otherwise (cert-manager's own Secret names, or none)
		}
		if err != nil {
			out = append(out, finding{check, warn, "not read: " + reason(err)})
			continue
		}
		for _, key := range []string{"tls.crt", "ca.crt"} {
			data := s.Data[key]
			if len(data) == 0 {
				continue
			}
			c, err := firstCert(data)
			if err != nil {
				out = append(out, finding{check, fail, fmt.Sprintf("%s: %v", key, err)})
				continue
			}
			left := c.NotAfter.Sub(e.now)
			detail := fmt.Sprintf("%s (%s) expires %s", key, c.Subject.CommonName, c.NotAfter.UTC().Format(time.DateOnly))
			switch {
			case left <= 0:
				out = append(out, finding{check, fail, detail + ": expired, peers refuse each other"})
			case left < certWarning:
				out = append(out, finding{check, warn, fmt.Sprintf("%s: in %d days", detail, int(left.Hours()/24))})
			default:
				out = append(out, finding{check, pass, detail})
			}
		}
	}
	return out
}

func firstCert(data []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

// volumes counts the volumes by phase and names those not Available.
func (e doctorEnv) volumes(ctx context.Context) []finding {
	list, err := e.dyn.Resource(rvapi.GVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []finding{{"volumes", warn, "ReplicatedVolumes not listed: " + reason(err)}}
	}
	phases := map[string]int{}
	var notAvailable []string
	for _, item := range list.Items {
		phase, _, _ := unstructured.NestedString(item.Object, "status", "phase")
		if phase == "" {
			phase = "Unknown"
		}
		phases[phase]++
		if phase != "Available" {
			notAvailable = append(notAvailable, item.GetName()+" ("+phase+")")
		}
	}
	var parts []string
	for p, n := range phases {
		parts = append(parts, fmt.Sprintf("%d %s", n, p))
	}
	sort.Strings(parts)
	summary := fmt.Sprintf("%d volumes", len(list.Items))
	if len(parts) > 0 {
		summary += ": " + strings.Join(parts, ", ")
	}
	if len(notAvailable) > 0 {
		sort.Strings(notAvailable)
		return []finding{{"volumes", warn, summary + "; not available: " + strings.Join(notAvailable, ", ")}}
	}
	return []finding{{"volumes", pass, summary}}
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

func reason(err error) string {
	if apierrors.IsNotFound(err) {
		return "not found"
	}
	if apierrors.IsForbidden(err) {
		return "forbidden to you"
	}
	return err.Error()
}

// writeDoctor prints the findings and reports whether none failed.
func writeDoctor(w io.Writer, fs []finding) bool {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
	healthy := true
	warnings := 0
	for _, f := range fs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Check, f.V, f.Detail)
		healthy = healthy && f.V != fail
		if f.V == warn {
			warnings++
		}
	}
	_ = tw.Flush()
	switch {
	case !healthy:
		fmt.Fprintln(w, "\nFerry is not healthy: see the FAIL lines.")
	case warnings > 0:
		fmt.Fprintf(w, "\nFerry works; %d warnings.\n", warnings)
	default:
		fmt.Fprintln(w, "\nFerry is healthy.")
	}
	return healthy
}

// sample is one series of a scrape: its labels and value.
type sample struct {
	labels map[string]string
	value  float64
}

// parseMetrics reads the text exposition format's samples (comments and
// malformed lines skipped), by metric name.
func parseMetrics(text string) map[string][]sample {
	out := map[string][]sample{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, rest := line, map[string]string{}, ""
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, rest = line[:i], line[j+1:]
			labels = parseLabels(line[i+1 : j])
		} else if i := strings.IndexByte(line, ' '); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		out[name] = append(out[name], sample{labels, v})
	}
	return out
}

// parseLabels reads `a="x",b="y"` (values as strconv.Unquote reads them).
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		k, rest, found := strings.Cut(s, "=")
		if !found || !strings.HasPrefix(rest, `"`) {
			return out
		}
		// The value ends at the first quote not escaped.
		end, escaped := 1, false
		for ; end < len(rest); end++ {
			if escaped {
				escaped = false
			} else if rest[end] == '\\' {
				escaped = true
			} else if rest[end] == '"' {
				break
			}
		}
		if end >= len(rest) {
			return out
		}
		v, err := strconv.Unquote(rest[:end+1])
		if err != nil {
			return out
		}
		out[strings.TrimSpace(k)] = v
		s = strings.TrimPrefix(rest[end+1:], ",")
	}
	return out
}

// first is the value of a metric's first series.
func first(m map[string][]sample, name string) (float64, bool) {
	if s := m[name]; len(s) > 0 {
		return s[0].value, true
	}
	return 0, false
}
