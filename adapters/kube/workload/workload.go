// Package workload applies a volume's replica workload to Kubernetes: the
// ReplicaSet of volume-manager pods (one per secondary copy, spread one per
// node by required pod anti-affinity, only on nodes running Ferry) and its
// PodDisruptionBudget, both owned by the volume's ReplicatedVolume so that
// the garbage collector removes them with it, and the volume's node-pinned
// replica pods, moved out of the ReplicaSet for a publish and back
// (ports.ReplicaWorkload). How many secondaries and how many a drain must
// leave come from domain/placement; the pods' settings from the replica
// template, except the snapshot interval (the volume's spec) and the
// allowed lag (the daemon's, Template.AllowedLag), which a template may
// not set. This package only renders and applies them.
package workload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

const (
	// LabelComponent's value on replica pods.
	ComponentReplica = "replica"
	// ComponentPrimary marks the active primary's pod.
	ComponentPrimary = rvapi.ComponentPrimary
	labelName        = "app.kubernetes.io/name"
	labelComponent   = rvapi.LabelComponent
	// TopologyKey is the node label the kubelet sets from Ferry's
	// NodeGetInfo: present exactly on nodes running Ferry's daemon.
	TopologyKey = "topology.ferry.zfs.csi.io/node"
	// ProbePort is the volume manager's readiness port (--probe-listen).
	ProbePort = 9808
)

// FencedTaint is the taint of a node whose primaries were taken over
// (adapters/kube/lostnode), tolerated by replica pods.
const FencedTaint = ports.FencedTaint

// Template is what every replica pod shares, from the deployment's
// configuration (deploy/replica-template.yaml, a ConfigMap the daemon
// reads with --replica-template).
type Template struct {
	Namespace       string            `json:"namespace"`
	Image           string            `json:"image"`
	ServiceAccount  string            `json:"serviceAccount"`
	PriorityClass   string            `json:"priorityClass"`
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// Args come after "volume-manager --volume=<id>": the pool, peer TLS
	// and cluster-state flags (they may use $(NODE_NAME)).
	Args []string `json:"args"`
	// Volumes and Mounts give the pod the node's ZFS (socket, devices,
	// dataset mount directory, where the watchdog also finds the
	// filesystem's device) and the peer TLS Secret.
	Volumes []corev1.Volume      `json:"volumes"`
	Mounts  []corev1.VolumeMount `json:"volumeMounts"`
	// HostPID runs the pod in the host's pid namespace: the watchdog
	// (--watchdog) must see, and stop, the processes holding its volume.
	HostPID bool `json:"hostPID,omitempty"`
	// MetricsListen is the daemon's --replica-metrics-listen, given to
	// every volume manager as $FERRY_METRICS_LISTEN (its --metrics-listen's
	// default: a flag would stop a volume manager of an earlier release,
	// which a rollback renews in place), with prometheus.io annotations
	// on its pod. Not in the template's YAML: a daemon of the previous
	// release, restarted during an upgrade, reads the new ConfigMap
	// strictly. "": none.
	MetricsListen string `json:"-"`
	// AllowedLag is the daemon's --allowed-lag, given to every volume
	// manager (--allowed-lag) so that a copy's readiness and a takeover
	// count the same lag: one source, never in Args.
	AllowedLag uint64 `json:"-"`
	// HostRoot is the daemon's --host-root, given to every volume manager
	// as $FERRY_HOST_ROOT (its zfs and zpool run the host's in it): an
	// environment variable, not a flag, so that a volume manager of an
	// earlier release (a rollback renews the pods in place) ignores it
	// and runs its image's own tools (the template mounts zfs-fuse's
	// socket where they look too; README, "Images", says what a rollback
	// does not support). The host root's mounts are the template's. One
	// source, never in Args.
	HostRoot string `json:"-"`
	// Daemon is the node DaemonSet whose daemon applies the template
	// (FollowDaemon): its replica pods run the daemon's own image, and it
	// rolls them to it while it is the DaemonSet's current one. Empty: the
	// template's image, and no roll.
	Daemon DaemonRef `json:"-"`
}

// DaemonRef names the node DaemonSet and its container running ferry.
type DaemonRef struct{ Namespace, DaemonSet, Container, Pod string }

// settingsOwnedElsewhere are volume-manager flags whose value has one
// source other than the template: the daemon's own flag, or the volume's
// spec.
var settingsOwnedElsewhere = []string{"--allowed-lag", "--snapshot-interval", "--host-root"}

// LoadTemplate reads a Template from YAML, strictly (an unknown key is
// an error, not a silently missing mount).
func LoadTemplate(path string) (Template, error) {
	var t Template
	b, err := os.ReadFile(path)
	if err != nil {
		return t, err
	}
	if err := yaml.UnmarshalStrict(b, &t); err != nil {
		return t, fmt.Errorf("replica template %s: %w", path, err)
	}
	if t.Namespace == "" || t.Image == "" || t.ServiceAccount == "" {
		return t, fmt.Errorf("replica template %s: namespace, image and serviceAccount are required", path)
	}
	for _, a := range t.Args {
		for _, f := range settingsOwnedElsewhere {
			if a == f || strings.HasPrefix(a, f+"=") {
				return t, fmt.Errorf("replica template %s: args must not set %s: the daemon's --allowed-lag and --host-root and the volume's snapshotInterval are given to every volume manager", path, f)
			}
		}
	}
	return t, nil
}

// Owner is the ReplicatedVolume the objects belong to.
type Owner struct {
	Volume volume.ID
	Name   string
	UID    types.UID
}

// Name is the ReplicaSet's and budget's name: "ferry-<volume>" when that
// is a valid DNS label of at most 52 bytes (pod names add 11), else
// "ferry-rv-" and a hash.
func Name(id volume.ID) string {
	n := "ferry-" + string(id)
	if len(n) <= 52 && len(validation.IsDNS1123Label(n)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(id))
	return "ferry-rv-" + hex.EncodeToString(sum[:12])
}

// Selector labels every replica pod of the volume carries.
func Selector(id volume.ID) map[string]string {
	return map[string]string{labelName: "ferry", labelComponent: ComponentReplica, rvapi.LabelVolume: rvapi.Hash(id)}
}

// Applier creates and updates the objects.
type Applier struct {
	client kubernetes.Interface
	dyn    dynamic.Interface
	tpl    Template
	// imageID is the daemon's own container's image ID once read (it
	// runs one image for its life): read once, not at every roll step.
	imageID atomic.Pointer[string]
}

var _ ports.ReplicaWorkload = (*Applier)(nil)

// New returns an applier; dyn reads the owning ReplicatedVolumes.
func New(client kubernetes.Interface, dyn dynamic.Interface, tpl Template) *Applier {
	return &Applier{client: client, dyn: dyn, tpl: tpl}
}

// owner reads the volume's ReplicatedVolume for its name and UID.
func (a *Applier) owner(ctx context.Context, id volume.ID) (Owner, error) {
	u, err := a.dyn.Resource(rvapi.GVR).Get(ctx, rvapi.ObjectName(id), metav1.GetOptions{})
	if err != nil {
		return Owner{}, fmt.Errorf("ReplicatedVolume of volume %s: %w", id, err)
	}
	return Owner{Volume: id, Name: u.GetName(), UID: u.GetUID()}, nil
}

// Apply implements ports.ReplicaWorkload.
func (a *Applier) Apply(ctx context.Context, id volume.ID, o placement.Objects, snapshotInterval time.Duration) error {
	owner, err := a.owner(ctx, id)
	if err != nil {
		return err
	}
	return a.Ensure(ctx, owner, o, interval(snapshotInterval))
}

func interval(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return d.String()
}

// Segment implements ports.ReplicaWorkload: the volume's placement label.
func (a *Applier) Segment(id volume.ID) (string, string) {
	return rvapi.UsableLabel(id), rvapi.UsableValue
}

// PodName is node's pinned replica pod of volume id.
func PodName(id volume.ID, node replica.Node) string {
	sum := sha256.Sum256([]byte(node))
	return Name(id) + "-" + hex.EncodeToString(sum[:4])
}

// StartReplica implements ports.ReplicaWorkload: a pod of the ReplicaSet's
// template bound to node (spec.nodeName: the scheduler is not asked, the
// copy is there), with the ReplicaSet's labels and no owner, so that the
// ReplicaSet adopts it, or, for the active primary, with labels outside
// the ReplicaSet's selector. An existing pod of that name is left alone.
func (a *Applier) StartReplica(ctx context.Context, id volume.ID, node replica.Node, snapshotInterval time.Duration, primary bool) error {
	owner, err := a.owner(ctx, id)
	if err != nil {
		return err
	}
	tpl := a.ReplicaSet(owner, placement.Objects{}, interval(snapshotInterval)).Spec.Template
	if cur, err := a.client.AppsV1().ReplicaSets(a.tpl.Namespace).Get(ctx, Name(id), metav1.GetOptions{}); err == nil {
		// The ReplicaSet's own template (its snapshot interval included):
		// an adopted pod must look like its siblings.
		tpl = cur.Spec.Template
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: PodName(id, node), Namespace: a.tpl.Namespace,
			Labels: tpl.Labels, Annotations: tpl.Annotations,
			// A controller reference only outside the ReplicaSet (which may
			// adopt it otherwise); the garbage collector removes it with
			// the ReplicatedVolume.
			OwnerReferences: podOwner(owner, primary)},
		Spec: *tpl.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = string(node)
	if primary {
		// Outside the ReplicaSet's selector (and budget); still under the
		// volume's label, so that secondaries avoid its node.
		pod.Labels = map[string]string{labelName: "ferry", labelComponent: ComponentPrimary, rvapi.LabelVolume: rvapi.Hash(id)}
	}
	_, err = a.client.CoreV1().Pods(a.tpl.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: "ferry"})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("start the replica pod of volume %s on %s: %w", id, node, err)
	}
	return nil
}

// Ensure makes the volume's ReplicaSet and budget say o: created when
// missing, their replicas and minAvailable changed when they differ, and
// nothing written when they already agree. The pod template is set at
// creation only (a new template would not restart running replicas).
func (a *Applier) Ensure(ctx context.Context, owner Owner, o placement.Objects, snapshotInterval string) error {
	rs := a.ReplicaSet(owner, o, snapshotInterval)
	rss := a.client.AppsV1().ReplicaSets(a.tpl.Namespace)
	cur, err := rss.Get(ctx, rs.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if err := a.ensurePrimaryBudget(ctx, owner); err != nil {
			return err
		}
		if _, err := rss.Create(ctx, rs, metav1.CreateOptions{FieldManager: "ferry"}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create ReplicaSet %s/%s: %w", a.tpl.Namespace, rs.Name, err)
		}
	case err != nil:
		return fmt.Errorf("read ReplicaSet %s/%s: %w", a.tpl.Namespace, rs.Name, err)
	case cur.Spec.Replicas == nil || *cur.Spec.Replicas != int32(o.Secondaries):
		patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, o.Secondaries)
		if _, err := rss.Patch(ctx, rs.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "ferry"}); err != nil {
			return fmt.Errorf("scale ReplicaSet %s/%s to %d: %w", a.tpl.Namespace, rs.Name, o.Secondaries, err)
		}
	}
	pdb := a.Budget(owner, o)
	pdbs := a.client.PolicyV1().PodDisruptionBudgets(a.tpl.Namespace)
	curPDB, err := pdbs.Get(ctx, pdb.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := pdbs.Create(ctx, pdb, metav1.CreateOptions{FieldManager: "ferry"}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create PodDisruptionBudget %s/%s: %w", a.tpl.Namespace, pdb.Name, err)
		}
	case err != nil:
		return fmt.Errorf("read PodDisruptionBudget %s/%s: %w", a.tpl.Namespace, pdb.Name, err)
	case curPDB.Spec.MinAvailable == nil || curPDB.Spec.MinAvailable.IntValue() != o.MinAvailable || curPDB.Spec.MinAvailable.Type != intstr.Int:
		patch := fmt.Appendf(nil, `{"spec":{"minAvailable":%d}}`, o.MinAvailable)
		if _, err := pdbs.Patch(ctx, pdb.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "ferry"}); err != nil {
			return fmt.Errorf("set minAvailable of PodDisruptionBudget %s/%s to %d: %w", a.tpl.Namespace, pdb.Name, o.MinAvailable, err)
		}
	}
	return nil
}

// PrimaryBudget renders the budget of the volume's pods outside its
// ReplicaSet (the active primary's, a publishing replica's): none may be
// evicted (maxUnavailable 0). A drain of the primary's node then evicts
// the pod using the volume first; its unpublish ends the primary's term
// and moves the replica pod back into the ReplicaSet, whose own budget
// then lets it go. Without it, the volume manager would be evicted from
// under a mounted primary, and the unpublish could not record the final
// snapshot until the daemon started it again.
func (a *Applier) PrimaryBudget(owner Owner) *policyv1.PodDisruptionBudget {
	zero := intstr.FromInt32(0)
	sel := map[string]string{labelName: "ferry", labelComponent: ComponentPrimary, rvapi.LabelVolume: rvapi.Hash(owner.Volume)}
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: Name(owner.Volume) + "-primary", Namespace: a.tpl.Namespace, Labels: sel, OwnerReferences: ownerRef(owner)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &zero,
			Selector:       &metav1.LabelSelector{MatchLabels: sel},
		},
	}
}

func (a *Applier) ensurePrimaryBudget(ctx context.Context, owner Owner) error {
	pdb := a.PrimaryBudget(owner)
	pdbs := a.client.PolicyV1().PodDisruptionBudgets(a.tpl.Namespace)
	if _, err := pdbs.Get(ctx, pdb.Name, metav1.GetOptions{}); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("read PodDisruptionBudget %s/%s: %w", a.tpl.Namespace, pdb.Name, err)
	}
	if _, err := pdbs.Create(ctx, pdb, metav1.CreateOptions{FieldManager: "ferry"}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create PodDisruptionBudget %s/%s: %w", a.tpl.Namespace, pdb.Name, err)
	}
	return nil
}

// podOwner is the reference of a replica pod to its volume: the
// controller of a pod outside the ReplicaSet (kubectl drain evicts only
// pods that name a controller), a plain owner otherwise (the ReplicaSet
// adopts only pods without a controller).
func podOwner(owner Owner, outside bool) []metav1.OwnerReference {
	refs := ownerRef(owner)
	refs[0].Controller = &outside
	return refs
}

func ownerRef(owner Owner) []metav1.OwnerReference {
	t := true
	return []metav1.OwnerReference{{APIVersion: rvapi.APIVersion, Kind: rvapi.Kind, Name: owner.Name, UID: owner.UID, BlockOwnerDeletion: &t}}
}

// ReplicaSet renders the volume's ReplicaSet.
func (a *Applier) ReplicaSet(owner Owner, o placement.Objects, snapshotInterval string) *appsv1.ReplicaSet {
	sel := Selector(owner.Volume)
	replicas := int32(o.Secondaries)
	args := append([]string{"volume-manager", "--volume=" + string(owner.Volume), "--node-id=$(NODE_NAME)",
		"--cluster-state=kubernetes", fmt.Sprintf("--probe-listen=:%d", ProbePort)}, a.tpl.Args...)
	if snapshotInterval != "" {
		args = append(args, "--snapshot-interval="+snapshotInterval)
	}
	if a.tpl.AllowedLag > 0 {
		args = append(args, fmt.Sprintf("--allowed-lag=%d", a.tpl.AllowedLag))
	}
	privileged := true
	grace := int64(60)
	podLabels := map[string]string{}
	for k, v := range sel {
		podLabels[k] = v
	}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: Name(owner.Volume), Namespace: a.tpl.Namespace, Labels: sel, OwnerReferences: ownerRef(owner),
			Annotations: map[string]string{"ferry.zfs.csi.io/volume-id": string(owner.Volume)}},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: a.podAnnotations(owner.Volume)},
				Spec: corev1.PodSpec{
					HostPID:                       a.tpl.HostPID,
					ServiceAccountName:            a.tpl.ServiceAccount,
					PriorityClassName:             a.tpl.PriorityClass,
					TerminationGracePeriodSeconds: &grace,
					// A copy resyncs on a node tainted fenced (after a
					// takeover) before the taint goes.
					Tolerations: []corev1.Toleration{{Key: FencedTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Affinity: &corev1.Affinity{
						NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
							NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
								{Key: TopologyKey, Operator: corev1.NodeSelectorOpExists}}}}},
							// A pod the ReplicaSet adds goes where the volume is usable
							// (a ready copy, placement.UsableOn) when such a node has
							// no pod of the volume yet: after a reinstall or a lost
							// workload, a copy whose daemon has not started its pinned
							// pod yet runs again instead of a new copy being made on a
							// node that holds none (a needless full transfer, and the
							// copy left without a pod destroyed as surplus).
							PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
								Weight: 100,
								Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
									{Key: rvapi.UsableLabel(owner.Volume), Operator: corev1.NodeSelectorOpIn, Values: []string{rvapi.UsableValue}}}}}}},
						PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{rvapi.LabelVolume: rvapi.Hash(owner.Volume)}},
							TopologyKey:   "kubernetes.io/hostname"}}},
					},
					Containers: []corev1.Container{{
						Name:            "volume-manager",
						Image:           a.tpl.Image,
						ImagePullPolicy: a.tpl.ImagePullPolicy,
						Args:            args,
						Env:             a.env(),
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(ProbePort)}},
							PeriodSeconds: 5, FailureThreshold: 1,
						},
						SecurityContext: &corev1.SecurityContext{Privileged: &privileged},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
						},
						VolumeMounts: a.tpl.Mounts,
					}},
					Volumes: a.tpl.Volumes,
				},
			},
		},
	}
}

// podAnnotations are a replica pod's: the volume's ID and, with a metrics
// endpoint, where a Prometheus that discovers pods scrapes it.
func (a *Applier) podAnnotations(id volume.ID) map[string]string {
	out := map[string]string{"ferry.zfs.csi.io/volume-id": string(id)}
	if l := a.tpl.MetricsListen; l != "" {
		if _, port, err := net.SplitHostPort(l); err == nil && port != "" {
			out["prometheus.io/scrape"], out["prometheus.io/port"], out["prometheus.io/path"] = "true", port, "/metrics"
		}
	}
	return out
}

// Budget renders the volume's PodDisruptionBudget.
func (a *Applier) Budget(owner Owner, o placement.Objects) *policyv1.PodDisruptionBudget {
	minAvail := intstr.FromInt32(int32(o.MinAvailable))
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: Name(owner.Volume), Namespace: a.tpl.Namespace, Labels: Selector(owner.Volume), OwnerReferences: ownerRef(owner)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &minAvail,
			Selector:     &metav1.LabelSelector{MatchLabels: Selector(owner.Volume)},
		},
	}
}

// Status implements ports.ReplicaWorkload.
func (a *Applier) Status(ctx context.Context, id volume.ID, node replica.Node) (ports.WorkloadStatus, error) {
	rs, err := a.client.AppsV1().ReplicaSets(a.tpl.Namespace).Get(ctx, Name(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ports.WorkloadStatus{}, fmt.Errorf("workload of volume %s: %w", id, ports.ErrNotFound)
	}
	if err != nil {
		return ports.WorkloadStatus{}, fmt.Errorf("workload of volume %s: %w", id, err)
	}
	var st ports.WorkloadStatus
	if rs.Spec.Replicas != nil {
		st.Secondaries = int(*rs.Spec.Replicas)
	}
	pods, err := a.client.CoreV1().Pods(a.tpl.Namespace).List(ctx, metav1.ListOptions{LabelSelector: rvapi.LabelVolume + "=" + rvapi.Hash(id)})
	if err != nil {
		return ports.WorkloadStatus{}, fmt.Errorf("replica pods of volume %s: %w", id, err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == string(node) {
			// A terminating pod counts: its volume manager may be leaving
			// the volume right now, and a new pod must not undo that.
			st.OnNode = true
		}
		if p.DeletionTimestamp == nil && p.Labels[labelComponent] == ComponentReplica {
			st.Running++
		}
		if p.DeletionTimestamp == nil && p.Labels[labelComponent] == ComponentPrimary {
			st.Outside++
			st.OutsideOnNode = st.OutsideOnNode || p.Spec.NodeName == string(node)
		}
	}
	return st, nil
}

// Scale implements ports.ReplicaWorkload.
func (a *Applier) Scale(ctx context.Context, id volume.ID, secondaries int) error {
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, secondaries)
	if _, err := a.client.AppsV1().ReplicaSets(a.tpl.Namespace).Patch(ctx, Name(id), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "ferry"}); err != nil {
		return fmt.Errorf("scale the workload of volume %s to %d: %w", id, secondaries, err)
	}
	return nil
}

// SetOutside implements ports.ReplicaWorkload: node's live replica pod of
// id gets the primary's component label (outside the ReplicaSet's
// selector: the ReplicaSet releases it) and a reference to the
// ReplicatedVolume (a pod the ReplicaSet made has no other owner, and must
// still go with the volume), or the replica's label again (the ReplicaSet
// adopts it). A strategic merge patch: owner references merge by UID.
func (a *Applier) SetOutside(ctx context.Context, id volume.ID, node replica.Node, outside bool) error {
	pods, err := a.client.CoreV1().Pods(a.tpl.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: rvapi.LabelVolume + "=" + rvapi.Hash(id),
		FieldSelector: "spec.nodeName=" + string(node),
	})
	if err != nil {
		return fmt.Errorf("replica pod of volume %s on %s: %w", id, node, err)
	}
	var pod *corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && p.Spec.NodeName == string(node) {
			pod = p
		}
	}
	if pod == nil {
		return fmt.Errorf("no live replica pod of volume %s on %s: %w", id, node, ports.ErrNotFound)
	}
	component := ComponentReplica
	if outside {
		component = ComponentPrimary
	}
	if pod.Labels[labelComponent] == component && volumeController(pod) == outside {
		return nil // already so: no write
	}
	owner, err := a.owner(ctx, id)
	if err != nil {
		return err
	}
	if outside {
		if err := a.ensurePrimaryBudget(ctx, owner); err != nil {
			return err
		}
	}
	// Out: the volume becomes the pod's controller (the ReplicaSet
	// releases it as its labels no longer match). In: a plain owner again,
	// so that the ReplicaSet adopts it. Owner references merge by UID.
	refs := []any{podOwner(owner, outside)[0]}
	if outside {
		// The ReplicaSet's controller reference goes in the same write:
		// a pod names one controller at most, and the ReplicaSet would
		// only release it later.
		for _, r := range pod.OwnerReferences {
			if r.Kind == "ReplicaSet" && r.Controller != nil && *r.Controller {
				refs = append(refs, map[string]any{"$patch": "delete", "uid": string(r.UID)})
			}
		}
	}
	patch := map[string]any{"metadata": map[string]any{
		"labels":          map[string]string{labelComponent: component},
		"ownerReferences": refs}}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if _, err := a.client.CoreV1().Pods(a.tpl.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{FieldManager: "ferry"}); err != nil {
		return fmt.Errorf("move the replica pod %s of volume %s %s the workload: %w", pod.Name, id, map[bool]string{true: "out of", false: "into"}[outside], err)
	}
	return nil
}

// volumeController: the pod names its ReplicatedVolume as its controller.
func volumeController(p *corev1.Pod) bool {
	for _, r := range p.OwnerReferences {
		if r.Kind == rvapi.Kind && r.APIVersion == rvapi.APIVersion {
			return r.Controller != nil && *r.Controller
		}
	}
	return false
}

// env is the volume manager's environment: its node, its namespace and,
// with the daemon's --host-root, where the host's root is mounted.
func (a *Applier) env() []corev1.EnvVar {
	env := []corev1.EnvVar{
		{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	}
	if a.tpl.HostRoot != "" {
		env = append(env, corev1.EnvVar{Name: EnvHostRoot, Value: a.tpl.HostRoot})
	}
	if a.tpl.MetricsListen != "" {
		env = append(env, corev1.EnvVar{Name: EnvMetricsListen, Value: a.tpl.MetricsListen})
	}
	return env
}

// EnvMetricsListen gives a volume manager its metrics endpoint
// (--metrics-listen's default).
const EnvMetricsListen = "FERRY_METRICS_LISTEN"

// EnvHostRoot names the host's root to a volume manager's zfs and zpool
// (cmd/ferry-hosttool).
const EnvHostRoot = "FERRY_HOST_ROOT"
