package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/volume"
)

// maxEvents is how many of the newest events describe shows.
const maxEvents = 15

// copyMetrics is what one copy's volume manager says of it when scraped.
type copyMetrics struct {
	Lag      *float64 // seconds; nil: not reported
	Transfer *transfer
}

// description is what `kubectl ferry describe` prints of one volume.
type description struct {
	rv     rvapi.ReplicatedVolume
	copies map[string]copyMetrics // by node
	events []corev1.Event         // newest last
	notes  []string               // what could not be read
}

// findVolume resolves what an operator names: a ReplicatedVolume's name, a
// volume's ID (its PersistentVolume's name), or a claim as
// NAMESPACE/NAME (or NAME with --namespace given, ns).
func findVolume(ctx context.Context, dyn dynamic.Interface, arg, ns string) (rvapi.ReplicatedVolume, error) {
	list, err := dyn.Resource(rvapi.GVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return rvapi.ReplicatedVolume{}, fmt.Errorf("list ReplicatedVolumes (is Ferry installed? may you list them?): %w", err)
	}
	claimNS, claimName, isClaim := strings.Cut(arg, "/")
	if !isClaim && ns != "" {
		claimNS, claimName, isClaim = ns, arg, true
	}
	var found []rvapi.ReplicatedVolume
	for _, item := range list.Items {
		b, err := item.MarshalJSON()
		if err != nil {
			return rvapi.ReplicatedVolume{}, err
		}
		var rv rvapi.ReplicatedVolume
		if err := json.Unmarshal(b, &rv); err != nil {
			return rvapi.ReplicatedVolume{}, fmt.Errorf("ReplicatedVolume %s: %w", item.GetName(), err)
		}
		switch {
		case isClaim && rv.Spec.ClaimNamespace == claimNS && rv.Spec.ClaimName == claimName:
		case !isClaim && (rv.Name == arg || rv.Spec.VolumeID == arg || rv.Spec.PersistentVolumeName == arg):
		default:
			continue
		}
		found = append(found, rv)
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) == 0 && isClaim:
		return rvapi.ReplicatedVolume{}, fmt.Errorf("no Ferry volume belongs to the claim %s/%s", claimNS, claimName)
	case len(found) == 0:
		return rvapi.ReplicatedVolume{}, fmt.Errorf("no Ferry volume %q (a volume's ID or PersistentVolume, or a claim as NAMESPACE/NAME)", arg)
	}
	names := make([]string, len(found))
	for i, rv := range found {
		names[i] = rv.Name
	}
	return rvapi.ReplicatedVolume{}, fmt.Errorf("%q names %d volumes: %s", arg, len(found), strings.Join(names, ", "))
}

// describe reads the volume's copies' metrics and its events (on the
// ReplicatedVolume and on its claim).
func describe(ctx context.Context, kube kubernetes.Interface, rv rvapi.ReplicatedVolume, ns string,
	scrape func(context.Context, corev1.Pod, string) (string, error)) description {
	d := description{rv: rv, copies: map[string]copyMetrics{}}
	id := volume.ID(volumeID(rv))
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: rvapi.LabelVolume + "=" + rvapi.Hash(id)})
	if err != nil {
		d.notes = append(d.notes, fmt.Sprintf("the replica pods could not be listed (%s): no lag or transfers", reason(err)))
	}
	if pods != nil {
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
				continue
			}
			port := p.Annotations["prometheus.io/port"]
			if port == "" {
				continue // a volume manager without metrics (an earlier release's)
			}
			text, err := scrape(ctx, p, port)
			if err != nil {
				d.notes = append(d.notes, fmt.Sprintf("the metrics of %s could not be read: %v", p.Name, err))
				continue
			}
			var c copyMetrics
			m := parseMetrics(text)
			if v, ok := first(m, "ferry_replica_lag_seconds"); ok {
				c.Lag = &v
			}
			if t, ok := transferOf(m); ok {
				c.Transfer = &t
			}
			d.copies[p.Spec.NodeName] = c
		}
	}
	d.events = append(d.events, eventsOf(ctx, kube, "default", rvapi.Kind, rv.Name, &d)...)
	if rv.Spec.ClaimName != "" {
		d.events = append(d.events, eventsOf(ctx, kube, rv.Spec.ClaimNamespace, "PersistentVolumeClaim", rv.Spec.ClaimName, &d)...)
	}
	sort.SliceStable(d.events, func(i, j int) bool { return eventTime(d.events[i]).Before(eventTime(d.events[j])) })
	// The same event is on the volume and its claim: shown once, at its
	// newest (the list is oldest first).
	seen := map[string]bool{}
	var uniq []corev1.Event
	for i := len(d.events) - 1; i >= 0; i-- {
		e := d.events[i]
		k := e.Reason + "\x00" + e.Message
		if seen[k] {
			continue
		}
		seen[k] = true
		uniq = append([]corev1.Event{e}, uniq...)
	}
	if len(uniq) > maxEvents {
		uniq = uniq[len(uniq)-maxEvents:]
	}
	d.events = uniq
	return d
}

func eventsOf(ctx context.Context, kube kubernetes.Interface, ns, kind, name string, d *description) []corev1.Event {
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name}.AsSelector().String()
	list, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		d.notes = append(d.notes, fmt.Sprintf("the events of %s %s could not be read (%s)", kind, name, reason(err)))
		return nil
	}
	var out []corev1.Event
	for _, e := range list.Items {
		// A fake or an older server may ignore the field selector.
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name {
			out = append(out, e)
		}
	}
	return out
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// writeDescription prints a description, kubectl describe's way.
func writeDescription(w io.Writer, d description, now time.Time) error {
	rv, sp, st := d.rv, d.rv.Spec, d.rv.Status
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	claim := "-"
	if sp.ClaimName != "" {
		claim = sp.ClaimNamespace + "/" + sp.ClaimName
	}
	interval := sp.SnapshotInterval
	if interval == "" {
		interval = "the volume managers' default"
	}
	fmt.Fprintf(tw, "Volume:\t%s\n", volumeID(rv))
	fmt.Fprintf(tw, "Claim:\t%s\n", claim)
	fmt.Fprintf(tw, "PersistentVolume:\t%s\n", orDash(sp.PersistentVolumeName))
	fmt.Fprintf(tw, "StorageClass:\t%s\n", orDash(sp.StorageClassName))
	if sp.CapacityBytes > 0 {
		fmt.Fprintf(tw, "Capacity:\t%s\n", size(sp.CapacityBytes))
	}
	fmt.Fprintf(tw, "Replication factor:\t%d\n", sp.ReplicationFactor)
	fmt.Fprintf(tw, "Snapshot interval:\t%s\n", interval)
	fmt.Fprintf(tw, "Phase:\t%s (%d ready)\n", orDash(st.Phase), st.ReadyReplicas)
	fmt.Fprintf(tw, "Primary:\t%s (epoch %d)\n", orDash(st.Primary), st.Epoch)
	fmt.Fprintf(tw, "Newest snapshot:\t%s\n", orDash(st.Newest))
	if len(st.Awaiting) > 0 {
		fmt.Fprintf(tw, "Awaiting:\t%s (rebuilt from the copies: these nodes have not answered)\n", strings.Join(st.Awaiting, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nCopies:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NODE\tROLE\tSNAPSHOT\tREADY\tLAG\tTRANSFER")
	for _, r := range st.Replicas {
		role := "secondary"
		switch {
		case r.Active:
			role = "primary"
		case r.Forked != nil && r.SnapshotEpoch < r.Forked.Epoch:
			role = "fenced branch"
		}
		snap := "-"
		if r.Snapshot != 0 {
			snap = fmt.Sprintf("ferry-%d-%d", r.SnapshotEpoch, r.Snapshot)
		}
		lag, tr := "?", "-"
		if c, ok := d.copies[r.Node]; ok {
			if c.Lag != nil {
				lag = (time.Duration(*c.Lag * float64(time.Second))).Round(time.Second).String()
			}
			if c.Transfer != nil {
				tr = progress(*c.Transfer)
			}
		}
		if r.Fetching != nil && tr == "-" {
			tr = fmt.Sprintf("fetching ferry-%d-%d", r.Fetching.Epoch, r.Fetching.Snapshot)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%v\t%s\t%s\n", r.Node, role, snap, r.Ready, lag, tr)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Replicas) == 0 {
		fmt.Fprintln(w, "  (none yet)")
	}
	fmt.Fprintln(w, "\nEvents (the volume's and its claim's, newest last):")
	if len(d.events) == 0 {
		fmt.Fprintln(w, "  <none>")
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, e := range d.events {
		age := "?"
		if t := eventTime(e); !t.IsZero() {
			age = now.Sub(t).Round(time.Second).String()
		}
		count := ""
		if e.Count > 1 {
			count = " (x" + strconv.Itoa(int(e.Count)) + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s%s\n", age, printable(e.Type), printable(e.Reason), printable(e.Message), count)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range d.notes {
		fmt.Fprintf(w, "\nNote: %s\n", n)
	}
	return nil
}
