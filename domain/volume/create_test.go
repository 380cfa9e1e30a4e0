package volume

import (
	"errors"
	"testing"
)

var rw = []Capability{{Mode: SingleNodeWriter}}

func TestParseCreateChecksEveryFieldOnceInTheOrderACallerFixesThem(t *testing.T) {
	cases := []struct {
		name  string
		req   CreateRequest
		field string // an *InvalidError's field; "" for the sentinel below
		is    error
	}{
		{"a hostile name", CreateRequest{Name: "../etc", Capabilities: rw}, "name", nil},
		{"a hostile name before no capability", CreateRequest{Name: "a/b"}, "name", nil},
		{"no capability", CreateRequest{Name: "pvc-1"}, "volume_capabilities", nil},
		{"a block volume", CreateRequest{Name: "pvc-1", Capabilities: []Capability{{Block: true, Mode: SingleNodeWriter}}}, "", ErrUnsupported},
		{"multi-node access", CreateRequest{Name: "pvc-1", Capabilities: []Capability{{Mode: MultiNodeMultiWriter}}}, "", ErrUnsupported},
		{"unsupported before a bad parameter", CreateRequest{Name: "pvc-1", Capabilities: []Capability{{Mode: MultiNodeMultiWriter}}, Parameters: map[string]string{"mountpoint": "/"}}, "", ErrUnsupported},
		{"a parameter Ferry does not allow", CreateRequest{Name: "pvc-1", Capabilities: rw, Parameters: map[string]string{"mountpoint": "/"}}, "parameters", nil},
		{"another pool", CreateRequest{Name: "pvc-1", Capabilities: rw, Parameters: map[string]string{"pool": "other"}}, "parameters.pool", nil},
		{"a negative capacity", CreateRequest{Name: "pvc-1", Capabilities: rw, Capacity: CapacityRange{RequiredBytes: -1}}, "capacity_range", nil},
		{"two sources", CreateRequest{Name: "pvc-1", Capabilities: rw, SourceSnapshotID: "s", SourceVolumeID: "v"}, "volume_content_source", nil},
	}
	for _, c := range cases {
		_, err := ParseCreate(c.req, "tank")
		var inv *InvalidError
		switch {
		case err == nil:
			t.Errorf("%s: accepted", c.name)
		case c.is != nil && !errors.Is(err, c.is):
			t.Errorf("%s: %v, want %v", c.name, err, c.is)
		case c.is == nil && (!errors.As(err, &inv) || inv.Field != c.field):
			t.Errorf("%s: %v, want an invalid %s", c.name, err, c.field)
		}
	}
}

func TestParseCreateGivesTheUseCaseAllItNeeds(t *testing.T) {
	params := map[string]string{"defaultReplicationFactor": "2", "pool": "tank", "snapshotInterval": "5s",
		MetaClaimNamespace: "db", MetaClaimName: "data", MetaPersistentVolume: "pv-9"}
	s, err := ParseCreate(CreateRequest{Name: "pvc-1", Capabilities: rw, Parameters: params, SourceSnapshotID: "snap-1",
		Capacity: CapacityRange{RequiredBytes: 1 << 30}}, "tank")
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "pvc-1" || s.Name != "pvc-1" || s.Size < 1<<30 || s.DefaultSize || s.Params.ReplicationFactor != 2 {
		t.Fatalf("spec %+v", s)
	}
	if s.Source != (Source{Kind: FromSnapshot, ID: "snap-1"}) || s.Source.String() != "snapshot:snap-1" {
		t.Fatalf("source %+v (%q)", s.Source, s.Source)
	}
	if ns, name := s.Claim(); ns != "db" || name != "data" || s.PersistentVolume() != "pv-9" {
		t.Fatalf("claim %s/%s, pv %s", ns, name, s.PersistentVolume())
	}
	// The digest is of the raw parameters, whatever their order: a retry
	// matches, a changed parameter does not.
	again, _ := ParseCreate(CreateRequest{Name: "pvc-1", Capabilities: rw, Parameters: map[string]string{
		MetaPersistentVolume: "pv-9", MetaClaimName: "data", MetaClaimNamespace: "db", "snapshotInterval": "5s", "pool": "tank", "defaultReplicationFactor": "2"}}, "tank")
	params["snapshotInterval"] = "6s"
	other, _ := ParseCreate(CreateRequest{Name: "pvc-1", Capabilities: rw, Parameters: params}, "tank")
	if again.ParamsDigest != s.ParamsDigest || other.ParamsDigest == s.ParamsDigest || len(s.ParamsDigest) != 16 {
		t.Fatalf("digests %q, retry %q, changed %q", s.ParamsDigest, again.ParamsDigest, other.ParamsDigest)
	}

	plain, err := ParseCreate(CreateRequest{Name: "pvc-2", Capabilities: rw}, "tank")
	if err != nil {
		t.Fatal(err)
	}
	if !plain.DefaultSize || plain.Source.Kind != NoSource || plain.Source.String() != "" || plain.PersistentVolume() != "pvc-2" {
		t.Fatalf("plain spec %+v", plain)
	}
	if ns, name := plain.Claim(); ns != "" || name != "" {
		t.Fatalf("a claim %s/%s nobody named", ns, name)
	}
	clone, _ := ParseCreate(CreateRequest{Name: "pvc-3", Capabilities: rw, SourceVolumeID: "pvc-1"}, "tank")
	if clone.Source.String() != "volume:pvc-1" {
		t.Fatalf("clone source %q", clone.Source)
	}
}
