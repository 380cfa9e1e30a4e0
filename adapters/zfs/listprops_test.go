package zfs

import (
	"strings"
	"testing"
)

// A pool that cannot encrypt (zfs-fuse) is asked exactly what it was
// before encryption: no encryption property, no encryption record.
func TestAPoolThatCannotEncryptIsAskedMainsPropertiesOnly(t *testing.T) {
	s := &Store{}
	if got := s.listProps(); got != propList || strings.Contains(got, "encryption") || strings.Contains(got, "key") {
		t.Fatalf("zfs get -o %s", got)
	}
	s.encrypts = true
	for _, p := range []string{"encryption", "encryptionroot", "keystatus", "keyformat", userPropPrefix + "encryption"} {
		if !strings.Contains(","+s.listProps()+",", ","+p+",") {
			t.Errorf("a pool that can encrypt is not asked %s: %s", p, s.listProps())
		}
	}
}
