package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-csi/ferry/ports"
)

// volumeInfoMaxAge is how long a read of the volume's spec serves scrapes:
// its claim and PersistentVolume do not change in a volume's life.
const volumeInfoMaxAge = 5 * time.Minute

// VolumeInfo is ferry_volume_info: 1, labelled with the volume's
// PersistentVolume, StorageClass and claim, so that any of Ferry's
// per-volume series can be read by claim (kube-state-metrics' way: join
// on volume and node with group_left). Absent until the spec was read.
type VolumeInfo struct {
	volume, node string
	desc         *prometheus.Desc
	*cached[ports.VolumeSpec]
}

// NewVolumeInfo registers ferry_volume_info of volume on node in r; spec
// reads the volume's spec.
func NewVolumeInfo(r prometheus.Registerer, volume, node string, spec func(context.Context) (ports.VolumeSpec, error)) *VolumeInfo {
	v := &VolumeInfo{volume: volume, node: node, cached: &cached[ports.VolumeSpec]{read: spec, maxAge: volumeInfoMaxAge},
		desc: prometheus.NewDesc("ferry_volume_info", "1, labelled with the volume's PersistentVolume, StorageClass and claim (join on volume and node).",
			[]string{"persistentvolume", "storageclass", "claim_namespace", "claim"}, prometheus.Labels{"volume": volume, "node": node})}
	r.MustRegister(v)
	return v
}

// Describe implements prometheus.Collector.
func (v *VolumeInfo) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

// Collect implements prometheus.Collector.
func (v *VolumeInfo) Collect(ch chan<- prometheus.Metric) {
	s, err := v.current()
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(v.desc, prometheus.GaugeValue, 1, s.PersistentVolume, s.StorageClass, s.ClaimNamespace, s.ClaimName)
}
