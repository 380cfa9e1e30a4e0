package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/ferry-csi/ferry/adapters/metrics"
	"github.com/ferry-csi/ferry/adapters/zfs"
)

// daemonContainer is the node daemon's container in its pod.
const daemonContainer = "ferry"

// keptOnNode is one node's copies kept aside, as its daemon lists them.
type keptOnNode struct {
	Node   string
	Pod    corev1.Pod
	Copies []metrics.KeptCopyJSON
	Err    error // the list could not be read
}

// fencedEnv is what `kubectl ferry fenced` reads and acts with: get reads
// a daemon's GET /kept (the pod proxy), exec runs a command in its
// container (pods/exec).
type fencedEnv struct {
	kube kubernetes.Interface
	ns   string
	get  func(ctx context.Context, pod corev1.Pod, port, path string) ([]byte, error)
	exec func(ctx context.Context, pod corev1.Pod, container string, argv []string) (string, error)
}

// listKept asks every running node daemon for its copies kept aside.
func (e fencedEnv) listKept(ctx context.Context) ([]keptOnNode, error) {
	ds, err := e.kube.AppsV1().DaemonSets(e.ns).Get(ctx, daemonSet, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("DaemonSet %s/%s: %w", e.ns, daemonSet, err)
	}
	pods, err := e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector)})
	if err != nil {
		return nil, fmt.Errorf("the node daemons' pods: %w", err)
	}
	var out []keptOnNode
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		port := daemonPort
		if v := p.Annotations["prometheus.io/port"]; v != "" {
			port = v
		}
		k := keptOnNode{Node: p.Spec.NodeName, Pod: p}
		body, err := e.get(ctx, p, port, "kept")
		if err == nil {
			err = json.Unmarshal(body, &k.Copies)
		}
		k.Err = err
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}

// writeKept prints every node's copies kept aside.
func writeKept(w io.Writer, nodes []keptOnNode, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tVOLUME\tSIZE\tKEPT\tNAME")
	n := 0
	var unread []string
	for _, k := range nodes {
		if k.Err != nil {
			unread = append(unread, fmt.Sprintf("%s (%v)", k.Node, k.Err))
			continue
		}
		for _, c := range k.Copies {
			age := "?"
			if !c.Taken.IsZero() {
				age = now.Sub(c.Taken).Round(time.Minute).String() + " ago"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.Node, printable(orDash(c.Volume)), size(c.Bytes), age, printable(c.Name))
			n++
		}
	}
	_ = tw.Flush()
	if n == 0 {
		fmt.Fprintln(w, "No copies kept aside.")
	} else {
		fmt.Fprintln(w, "\nInspect one: kubectl ferry fenced inspect NODE NAME; drop it: kubectl ferry fenced drop NODE NAME")
	}
	for _, u := range unread {
		fmt.Fprintf(w, "Not read: %s\n", u)
	}
}

// findKept finds NAME among NODE's copies kept aside: only a copy its
// daemon lists may be dropped.
func findKept(nodes []keptOnNode, node, name string) (keptOnNode, metrics.KeptCopyJSON, error) {
	for _, k := range nodes {
		if k.Node != node {
			continue
		}
		if k.Err != nil {
			return k, metrics.KeptCopyJSON{}, fmt.Errorf("the copies kept aside on %s could not be listed: %w", node, k.Err)
		}
		for _, c := range k.Copies {
			if c.Name == name {
				return k, c, nil
			}
		}
		return k, metrics.KeptCopyJSON{}, fmt.Errorf("%s keeps no copy named %q (kubectl ferry fenced lists them)", node, name)
	}
	return keptOnNode{}, metrics.KeptCopyJSON{}, fmt.Errorf("no running node daemon on %q", node)
}

// drop destroys a copy kept aside, after the operator confirmed it by its
// name (unless yes): the hold is released and the copy's dataset
// destroyed, by the node's own zfs in its daemon's container.
func (e fencedEnv) drop(ctx context.Context, nodes []keptOnNode, node, name string, yes bool, in io.Reader, out io.Writer) error {
	k, c, err := findKept(nodes, node, name)
	if err != nil {
		return err
	}
	dataset, err := keptDataset(c)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Dropping %s on %s: the writes of volume %s it holds (%s) are destroyed for good.\n", c.Name, node, orDash(c.Volume), size(c.Bytes))
	if !yes {
		fmt.Fprint(out, "Type the copy's name to confirm: ")
		line, _ := bufio.NewReader(in).ReadString('\n')
		if strings.TrimSpace(line) != c.Name {
			return fmt.Errorf("not confirmed: nothing dropped")
		}
	}
	// Its own deadline: the confirmation may have taken a while.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	for _, argv := range [][]string{{"zfs", "release", zfs.FencedHold, c.Name}, {"zfs", "destroy", "-r", dataset}} {
		msg, err := e.exec(ctx, k.Pod, daemonContainer, argv)
		if err != nil && argv[1] == "release" && strings.Contains(msg, "no such tag") {
			err = nil // released by an earlier drop that failed at the destroy
		}
		if err != nil {
			return fmt.Errorf("%s on %s: %v: %s", strings.Join(argv, " "), node, err, strings.TrimSpace(printable(msg)))
		}
	}
	fmt.Fprintf(out, "Dropped %s on %s.\n", c.Name, node)
	return nil
}

// keptDataset is the dataset of a copy kept aside, checked against what
// Ferry keeps (a listing is the daemon's word, and the drop destroys what
// it names): directly below the node's kept root, named
// "<volume>-<name>@<name>", nothing but a dataset's characters.
func keptDataset(c metrics.KeptCopyJSON) (string, error) {
	bad := fmt.Errorf("%q is not the name of a copy kept aside below %q: nothing dropped", c.Name, c.Root)
	dataset, snap, ok := strings.Cut(c.Name, "@")
	if !ok || snap == "" || strings.Contains(snap, "@") || c.Root == "" || !strings.HasSuffix(c.Root, "-fenced") ||
		path.Dir(dataset) != c.Root || !strings.HasSuffix(path.Base(dataset), "-"+snap) || strings.HasPrefix(dataset, "-") {
		return "", bad
	}
	for _, r := range c.Name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@", r)) {
			return "", bad
		}
	}
	return dataset, nil
}

// printable drops the control characters of text from the cluster (an
// event's message, a listing): they are never sent to the terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return -1
		}
		return r
	}, s)
}

// inspect says what a copy kept aside is and how to look at it.
func inspect(nodes []keptOnNode, node, name string, out io.Writer) error {
	_, c, err := findKept(nodes, node, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Copy:    %s\nNode:    %s\nVolume:  %s\nSize:    %s\n", printable(c.Name), node, printable(orDash(c.Volume)), size(c.Bytes))
	if !c.Taken.IsZero() {
		fmt.Fprintf(out, "Kept:    %s\n", c.Taken.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(out, "Inspect: on %s, %s\nDrop:    kubectl ferry fenced drop %s %s (on the node: %s)\n", node, printable(c.Inspect), node, printable(c.Name), printable(c.Drop))
	return nil
}

// proxyGet reads path from a pod's port through the API server's pod
// proxy, within scrapeTimeout.
func proxyGet(kube kubernetes.Interface) func(ctx context.Context, p corev1.Pod, port, path string) ([]byte, error) {
	return func(ctx context.Context, p corev1.Pod, port, path string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
		defer cancel()
		return kube.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, port, path, nil).DoRaw(ctx)
	}
}

// podExec runs argv in a pod's container (pods/exec, WebSocket first,
// SPDY where the server has no WebSocket), and returns what it wrote.
func podExec(cfg *rest.Config, kube kubernetes.Interface) func(ctx context.Context, p corev1.Pod, container string, argv []string) (string, error) {
	return func(ctx context.Context, p corev1.Pod, container string, argv []string) (string, error) {
		req := kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.Namespace).Name(p.Name).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: container, Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
		ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
		if err != nil {
			return "", err
		}
		spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
		if err != nil {
			return "", err
		}
		ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool { return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err) })
		if err != nil {
			return "", err
		}
		var out bytes.Buffer
		err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out})
		return out.String(), err
	}
}
