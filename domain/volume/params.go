package volume

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// StorageClass parameter keys Ferry understands.
const (
	// ParamReplicationFactor is the replication factor a new volume gets;
	// the volume's own (its ReplicatedVolume's spec) may be edited later.
	ParamReplicationFactor = "defaultReplicationFactor"
	ParamPool              = "pool"
	ParamSnapshotInterval  = "snapshotInterval"
	ParamCompression       = "compression"
	ParamRecordSize        = "recordsize"
	ParamAtime             = "atime"

	// metadataPrefix marks the keys the external-provisioner adds with
	// --extra-create-metadata (PVC name and namespace, PV name). They are
	// accepted and recorded, never interpreted.
	metadataPrefix = "csi.storage.k8s.io/"
)

// Replication factor bounds and defaults. The default is 1 so that a missing
// parameter never leaves a volume waiting for nodes that may not exist.
const (
	DefaultReplicationFactor = 1
	MaxReplicationFactor     = 5
	DefaultSnapshotInterval  = 30 * time.Second
	MinSnapshotInterval      = time.Second
	MaxSnapshotInterval      = 24 * time.Hour
)

// Params are a volume's validated StorageClass parameters.
type Params struct {
	ReplicationFactor int
	// Pool is the pool the volume must live in; empty means the node's default.
	Pool             string
	SnapshotInterval time.Duration
	// Properties are native ZFS properties, already normalised (recordsize in
	// bytes), taken only from the allow-list below.
	Properties map[string]string
	// Metadata holds the provisioner's csi.storage.k8s.io/* keys, verbatim.
	Metadata map[string]string
	// Encryption is ZFS native encryption (encryption.go): set once, at
	// creation, never among Properties (a copy's properties are set after
	// its receive, and encryption cannot be).
	Encryption Encryption
}

// propertyRules is the allow-list of ZFS properties a StorageClass may set,
// each with its validator. Anything else (mountpoint, canmount, quota,
// sharenfs, ...) would let a StorageClass author escape the driver's control
// of the dataset, so it is refused.
var propertyRules = map[string]func(string) (string, error){
	ParamCompression: compression,
	ParamAtime:       oneOf([]string{"on", "off"}),
	ParamRecordSize:  recordSize,
}

func compressionValues() []string {
	v := []string{"on", "off", "lzjb", "zle", "lz4", "gzip", "zstd", "zstd-fast"}
	for i := 1; i <= 9; i++ {
		v = append(v, "gzip-"+strconv.Itoa(i))
	}
	for i := 1; i <= 19; i++ {
		v = append(v, "zstd-"+strconv.Itoa(i))
	}
	return v
}

// AllowedParameters lists every key ParseParams accepts, for error messages
// and documentation.
func AllowedParameters() []string {
	keys := []string{ParamReplicationFactor, ParamPool, ParamSnapshotInterval, ParamEncryption, ParamKeyFormat}
	for k := range propertyRules {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ParseParams validates StorageClass parameters. Unknown keys are an error
// (a typo such as "defaultreplicationfactor" must not silently give one copy).
func ParseParams(in map[string]string) (Params, error) {
	p := Params{
		ReplicationFactor: DefaultReplicationFactor,
		SnapshotInterval:  DefaultSnapshotInterval,
		Properties:        map[string]string{},
		Metadata:          map[string]string{},
	}
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic: the first bad key is always the same one
	for _, k := range keys {
		v := in[k]
		field := "parameters." + k
		switch {
		case k == ParamEncryption || k == ParamKeyFormat:
			// Read together below: a key format means nothing alone.
		case k == ParamReplicationFactor:
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxReplicationFactor {
				return Params{}, invalid(field, v, fmt.Sprintf("must be an integer from 1 to %d", MaxReplicationFactor))
			}
			p.ReplicationFactor = n
		case k == ParamPool:
			if err := checkPoolName(field, v); err != nil {
				return Params{}, err
			}
			p.Pool = v
		case k == ParamSnapshotInterval:
			d, err := time.ParseDuration(v)
			if err != nil || d < MinSnapshotInterval || d > MaxSnapshotInterval {
				return Params{}, invalid(field, v, fmt.Sprintf("must be a duration from %s to %s, such as 30s", MinSnapshotInterval, MaxSnapshotInterval))
			}
			p.SnapshotInterval = d
		case k == "replicationFactor":
			return Params{}, invalid("parameters", k, "renamed to "+ParamReplicationFactor)
		case strings.HasPrefix(k, metadataPrefix):
			p.Metadata[k] = v
		default:
			rule, ok := propertyRules[k]
			if !ok {
				return Params{}, invalid("parameters", k, "unknown parameter; allowed: "+strings.Join(AllowedParameters(), ", "))
			}
			norm, err := rule(v)
			if err != nil {
				return Params{}, invalid(field, v, err.Error())
			}
			p.Properties[k] = norm
		}
	}
	enc, err := parseEncryption(in)
	if err != nil {
		return Params{}, err
	}
	p.Encryption = enc
	return p, nil
}

// ParseProperties validates native properties as a StorageClass would
// set them (the allow-list and its values), normalised: the properties a
// volume's spec records for every copy. nil for none.
func ParseProperties(in map[string]string) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]string, len(in))
	for _, k := range keys {
		rule, ok := propertyRules[k]
		if !ok {
			return nil, invalid("properties", k, "not a property Ferry sets")
		}
		norm, err := rule(in[k])
		if err != nil {
			return nil, invalid("properties."+k, in[k], err.Error())
		}
		out[k] = norm
	}
	return out, nil
}

// checkPoolName accepts ZFS pool names: a letter first, then letters,
// digits, '_', '-', '.'; at most 64 bytes.
func checkPoolName(field, s string) error {
	if s == "" || len(s) > 64 || !isLetter(s[0]) {
		return invalid(field, s, "must be 1 to 64 characters starting with a letter")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return invalid(field, s, fmt.Sprintf("character %q is not allowed in a pool name", c))
		}
	}
	return nil
}

func isLetter(c byte) bool { return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') }

func oneOf(values []string) func(string) (string, error) {
	return func(v string) (string, error) {
		for _, a := range values {
			if v == a {
				return v, nil
			}
		}
		return "", fmt.Errorf("must be one of %s", strings.Join(values, ", "))
	}
}

// compression accepts the algorithms ZFS knows, as ZFS reports them:
// gzip-6 is reported "gzip" (the same level), so it is recorded so, and
// every copy's reported value then matches the volume's.
func compression(v string) (string, error) {
	v, err := oneOf(compressionValues())(v)
	if v == "gzip-6" {
		v = "gzip"
	}
	return v, err
}

// recordSize accepts a power of two from 512 bytes to 1 MiB, written in
// bytes or with a K/M suffix ("128k"), and returns it in bytes.
func recordSize(v string) (string, error) {
	s := strings.ToLower(v)
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1<<10, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "m"):
		mult, s = 1<<20, strings.TrimSuffix(s, "m")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	bad := fmt.Errorf("must be a power of two from 512 to 1M, such as 128k")
	if err != nil || n <= 0 || n > (1<<20) {
		return "", bad
	}
	n *= mult
	if n < 512 || n > 1<<20 || n&(n-1) != 0 {
		return "", bad
	}
	return strconv.FormatInt(n, 10), nil
}
