package main

import (
	"errors"
	"flag"
	"os"
	"time"
)

// Options are every mode's flags; each mode registers the ones it uses.
type Options struct {
	LogLevel    string
	LogFormat   string
	StopTimeout time.Duration

	DriverName  string
	NodeID      string
	CSIEndpoint string

	Store     string // "zfs" or "memory"
	Pool      string
	Parent    string
	ZFSBin    string
	ZpoolBin  string
	MemoryDir string

	Volume string // volume-manager: the volume ID
}

// DefaultDriverName is Ferry's CSI driver name.
const DefaultDriverName = "ferry.zfs.csi.io"

func commonFlags(fs *flag.FlagSet) *Options {
	o := &Options{}
	fs.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.LogFormat, "log-format", "json", "log format: json or console")
	fs.DurationVar(&o.StopTimeout, "stop-timeout", 30*time.Second, "on SIGTERM, how long calls in flight may take to finish")
	return o
}

func nodeFlags(fs *flag.FlagSet, o *Options) {
	fs.StringVar(&o.DriverName, "driver-name", DefaultDriverName, "CSI driver name, also written on every dataset as its owner")
	fs.StringVar(&o.NodeID, "node-id", os.Getenv("NODE_NAME"), "this node's name (default: $NODE_NAME)")
}

func storeFlags(fs *flag.FlagSet, o *Options) {
	fs.StringVar(&o.Store, "store", "zfs", "storage backend: zfs, or memory (volumes in a local directory; for development only)")
	fs.StringVar(&o.Pool, "pool", "ferry", "ZFS pool that holds the volumes")
	fs.StringVar(&o.Parent, "parent-dataset", "ferry", "dataset under the pool that Ferry owns; volumes are its children")
	fs.StringVar(&o.ZFSBin, "zfs", "zfs", "path of the zfs command")
	fs.StringVar(&o.ZpoolBin, "zpool", "zpool", "path of the zpool command")
	fs.StringVar(&o.MemoryDir, "memory-dir", "/var/tmp/ferry-memory", "directory of the memory store's volumes")
}

func daemonFlags(fs *flag.FlagSet) *Options {
	o := commonFlags(fs)
	nodeFlags(fs, o)
	storeFlags(fs, o)
	fs.StringVar(&o.CSIEndpoint, "csi-endpoint", "unix:///var/lib/kubelet/plugins/"+DefaultDriverName+"/csi.sock", "CSI node service socket")
	return o
}

func controllerFlags(fs *flag.FlagSet) *Options {
	o := commonFlags(fs)
	nodeFlags(fs, o)
	storeFlags(fs, o)
	fs.StringVar(&o.CSIEndpoint, "csi-endpoint", "unix:///csi/csi.sock", "CSI controller service socket")
	return o
}

func volumeManagerFlags(fs *flag.FlagSet) *Options {
	o := commonFlags(fs)
	nodeFlags(fs, o)
	storeFlags(fs, o)
	fs.StringVar(&o.Volume, "volume", os.Getenv("FERRY_VOLUME"), "ID of the volume whose replica this process manages (default: $FERRY_VOLUME)")
	return o
}

func (o *Options) validate(mode string) error {
	var errs []error
	if o.NodeID == "" {
		errs = append(errs, errors.New("--node-id is required (or set NODE_NAME)"))
	}
	if o.Store != "zfs" && o.Store != "memory" {
		errs = append(errs, errors.New("--store must be zfs or memory"))
	}
	if mode == "volume-manager" && o.Volume == "" {
		errs = append(errs, errors.New("--volume is required (or set FERRY_VOLUME)"))
	}
	return errors.Join(errs...)
}
