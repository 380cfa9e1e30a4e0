package volume

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseParamsDefaultsWhenEmpty(t *testing.T) {
	p, err := ParseParams(nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.ReplicationFactor != DefaultReplicationFactor || p.SnapshotInterval != DefaultSnapshotInterval || p.Pool != "" || len(p.Properties) != 0 {
		t.Fatalf("defaults = %+v", p)
	}
}

func TestParseParamsNormalisesAllowedValues(t *testing.T) {
	p, err := ParseParams(map[string]string{
		"defaultReplicationFactor": "3", "pool": "tank", "snapshotInterval": "1m",
		"compression": "lz4", "recordsize": "128k", "atime": "off",
		"csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "db",
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.ReplicationFactor != 3 || p.Pool != "tank" || p.SnapshotInterval != time.Minute {
		t.Fatalf("got %+v", p)
	}
	if p.Properties["recordsize"] != "131072" || p.Properties["compression"] != "lz4" || p.Properties["atime"] != "off" {
		t.Fatalf("properties %v", p.Properties)
	}
	if p.Metadata["csi.storage.k8s.io/pvc/name"] != "data" {
		t.Fatalf("metadata %v", p.Metadata)
	}
	// gzip-6 as ZFS reports it, so that a copy's value matches.
	if p, err := ParseParams(map[string]string{"compression": "gzip-6"}); err != nil || p.Properties["compression"] != "gzip" {
		t.Fatalf("compression gzip-6: %v %v, want gzip", p.Properties, err)
	}
}

func TestParseParamsRefusesWhatItDoesNotKnow(t *testing.T) {
	cases := map[string]map[string]string{
		"typo in a key":             {"replicationfactor": "2"},
		"a property not allowed":    {"mountpoint": "/etc"},
		"quota by the back door":    {"quota": "1T"},
		"replication factor zero":   {"defaultReplicationFactor": "0"},
		"replication factor huge":   {"defaultReplicationFactor": "99"},
		"replication factor words":  {"defaultReplicationFactor": "two"},
		"unknown compression":       {"compression": "bogus"},
		"recordsize not power of 2": {"recordsize": "100k"},
		"recordsize too large":      {"recordsize": "4M"},
		"atime yes":                 {"atime": "yes"},
		"pool with a slash":         {"pool": "tank/evil"},
		"pool with shell":           {"pool": "tank;reboot"},
		"interval too short":        {"snapshotInterval": "10ms"},
		"interval garbage":          {"snapshotInterval": "soon"},
	}
	for name, in := range cases {
		_, err := ParseParams(in)
		var inv *InvalidError
		if !errors.As(err, &inv) {
			t.Errorf("%s: ParseParams(%v) = %v, want InvalidError", name, in, err)
		}
	}
	_, err := ParseParams(map[string]string{"bogus": "1"})
	if err == nil || !strings.Contains(err.Error(), "defaultReplicationFactor") {
		t.Errorf("an unknown key's error should list the allowed keys: %v", err)
	}
	_, err = ParseParams(map[string]string{"replicationFactor": "2"})
	if err == nil || !strings.Contains(err.Error(), "renamed to defaultReplicationFactor") {
		t.Errorf("the old name must say what it became: %v", err)
	}
}
