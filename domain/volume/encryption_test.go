package volume

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestEncryptionParametersAreValidated(t *testing.T) {
	cases := []struct {
		name string
		in   map[string]string
		want Encryption
		bad  string // the field refused; "" when accepted
	}{
		{"none asked", map[string]string{}, Encryption{}, ""},
		{"off", map[string]string{"encryption": "off"}, Encryption{}, ""},
		{"on is aes-256-gcm with a passphrase", map[string]string{"encryption": "on"}, Encryption{"aes-256-gcm", KeyPassphrase}, ""},
		{"a named cipher", map[string]string{"encryption": "aes-128-ccm", "keyformat": "hex"}, Encryption{"aes-128-ccm", KeyHex}, ""},
		{"raw keys", map[string]string{"encryption": "on", "keyformat": "raw"}, Encryption{"aes-256-gcm", KeyRaw}, ""},
		{"an unknown cipher", map[string]string{"encryption": "rot13"}, Encryption{}, "parameters.encryption"},
		{"a cipher in capitals", map[string]string{"encryption": "AES-256-GCM"}, Encryption{}, "parameters.encryption"},
		{"an unknown key format", map[string]string{"encryption": "on", "keyformat": "file"}, Encryption{}, "parameters.keyformat"},
		{"a key format without encryption", map[string]string{"keyformat": "raw"}, Encryption{}, "parameters.keyformat"},
		{"a key format with encryption off", map[string]string{"encryption": "off", "keyformat": "raw"}, Encryption{}, "parameters.keyformat"},
		{"keylocation is not Ferry's to set", map[string]string{"encryption": "on", "keylocation": "file:///etc/shadow"}, Encryption{}, "parameters"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := ParseParams(c.in)
			var ie *InvalidError
			switch {
			case c.bad == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.bad == "" && p.Encryption != c.want:
				t.Fatalf("Encryption = %+v, want %+v", p.Encryption, c.want)
			case c.bad != "" && (!errors.As(err, &ie) || ie.Field != c.bad):
				t.Fatalf("err = %v, want an InvalidError on %s", err, c.bad)
			}
			if c.bad == "" && len(p.Properties) != 0 {
				t.Fatalf("encryption leaked into the properties set after a copy: %v", p.Properties)
			}
		})
	}
}

func TestAKeyMustHaveItsFormatsExactLengthAndNeverShowsInAnError(t *testing.T) {
	secret := "s3cr3t-passphrase-do-not-print"
	cases := []struct {
		name   string
		format KeyFormat
		key    *string // nil: no field
		ok     bool
	}{
		{"no key field", KeyPassphrase, nil, false},
		{"an empty key", KeyPassphrase, ptr(""), false},
		{"a passphrase of 7 bytes", KeyPassphrase, ptr("1234567"), false},
		{"a passphrase of 8 bytes", KeyPassphrase, ptr("12345678"), true},
		{"a passphrase of 512 bytes", KeyPassphrase, ptr(strings.Repeat("p", 512)), true},
		{"a passphrase of 513 bytes", KeyPassphrase, ptr(strings.Repeat("p", 513)), false},
		{"a passphrase with a newline", KeyPassphrase, ptr("12345678\nrest"), false},
		{"a passphrase", KeyPassphrase, &secret, true},
		{"raw, 32 bytes", KeyRaw, ptr(strings.Repeat("\x01", 32)), true},
		{"raw, 31 bytes", KeyRaw, ptr(strings.Repeat("\x01", 31)), false},
		{"raw, 33 bytes", KeyRaw, ptr(strings.Repeat("\x01", 33)), false},
		{"hex, 64 characters", KeyHex, ptr(strings.Repeat("aF", 32)), true},
		{"hex, 63 characters", KeyHex, ptr(strings.Repeat("a", 63)), false},
		{"hex, 64 characters not all hex", KeyHex, ptr(strings.Repeat("g", 64)), false},
		{"an unknown format", KeyFormat("file"), &secret, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			secrets := map[string]string{"other": secret}
			if c.key != nil {
				secrets[SecretKeyField] = *c.key
			}
			k, err := ParseKey(c.format, secrets)
			if c.ok != (err == nil) {
				t.Fatalf("ParseKey = %v, want ok %v", err, c.ok)
			}
			var ie *InvalidError
			if err != nil && !errors.As(err, &ie) {
				t.Fatalf("err %v is not an InvalidError (InvalidArgument)", err)
			}
			if c.key != nil && len(*c.key) > 2 && err != nil && strings.Contains(err.Error(), *c.key) {
				t.Fatalf("the error shows the key: %v", err)
			}
			if err != nil && strings.Contains(err.Error(), "got") {
				t.Fatalf("the error tells the key's length: %v", err)
			}
			if c.ok && string(k.Bytes()) != *c.key {
				t.Fatal("the key is not the Secret's")
			}
			for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
				if out := fmt.Sprintf(verb, k); out != "[redacted]" {
					t.Fatalf("%s of a key prints %q", verb, out)
				}
			}
			if out := fmt.Sprintf("%+v", struct{ K Key }{k}); strings.Contains(out, secret) {
				t.Fatalf("a struct holding a key prints it: %s", out)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestAnEncryptedVolumeIsCreatedWithItsKeyAndNeverAsACopy(t *testing.T) {
	caps := rw
	base := CreateRequest{Name: "pvc-1", Capabilities: caps, Parameters: map[string]string{"encryption": "on"}}
	if _, err := ParseCreate(base, "tank"); !isInvalid(err, "secrets.key") {
		t.Fatalf("no Secret: %v, want InvalidError on secrets.key", err)
	}
	req := base
	req.Secrets = map[string]string{"key": "correct horse battery"}
	spec, err := ParseCreate(req, "tank")
	if err != nil || string(spec.Key.Bytes()) != "correct horse battery" || !spec.Params.Encryption.On() {
		t.Fatalf("ParseCreate = %+v, %v", spec, err)
	}
	req.SourceSnapshotID = "pvc-0@snap"
	if _, err := ParseCreate(req, "tank"); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("an encrypted restore: %v, want ErrUnsupported", err)
	}
	plain := CreateRequest{Name: "pvc-2", Capabilities: caps, Secrets: map[string]string{"key": "x"}}
	if spec, err := ParseCreate(plain, "tank"); err != nil || !spec.Key.Empty() {
		t.Fatalf("a plaintext volume with a Secret: %+v, %v; want no key taken", spec, err)
	}
}

func isInvalid(err error, field string) bool {
	var ie *InvalidError
	return errors.As(err, &ie) && ie.Field == field
}

var (
	plainPool   = Stored{Known: true, Cipher: "off", KeyFormat: "none"}
	ownRoot     = Stored{Known: true, Cipher: "aes-256-gcm", OwnRoot: true, KeyFormat: KeyPassphrase}
	ownRootOpen = Stored{Known: true, Cipher: "aes-256-gcm", OwnRoot: true, KeyFormat: KeyPassphrase, KeyLoaded: true}
	inherited   = Stored{Known: true, Cipher: "aes-256-gcm", OwnRoot: false, KeyFormat: KeyPassphrase, KeyLoaded: true}
	// inheritedShut: a parent's key not loaded on this node.
	inheritedShut = Stored{Known: true, Cipher: "aes-256-gcm", OwnRoot: false, KeyFormat: KeyPassphrase}
	unknown       = Stored{}
)

const encRecord = "aes-256-gcm/passphrase"

func TestAVolumeFerryEncryptedIsSentRawAndNothingEncryptedIsEverSentDecrypted(t *testing.T) {
	cases := []struct {
		name   string
		record string
		st     Stored
		raw    bool
		refuse bool
	}{
		{"plaintext, recorded", "off", plainPool, false, false},
		{"plaintext, from before the record", "", plainPool, false, false},
		{"Ferry's own encryption root, key not loaded (a secondary)", encRecord, ownRoot, true, false},
		{"Ferry's own encryption root, key loaded (the primary)", encRecord, ownRootOpen, true, false},
		{"encrypted, no record", "", ownRootOpen, false, true},
		{"encrypted, an unreadable record", "aes-256-gcm", ownRootOpen, false, true},
		{"encrypted by a parent, record off: an ordinary volume", "off", inherited, false, false},
		{"encrypted by a parent, no record: an ordinary volume", "", inherited, false, false},
		{"encrypted by a parent, key not loaded, no record: an ordinary volume", "", inheritedShut, false, false},
		{"encrypted by a parent, an unreadable record", "aes-256-gcm", inherited, false, true},
		{"its own root, recorded off", "off", ownRootOpen, false, true},
		{"recorded encrypted, inherits its parent's key", encRecord, inherited, false, true},
		{"recorded encrypted, the pool says plaintext", encRecord, plainPool, false, true},
		{"the pool did not answer", "off", unknown, false, true},
		{"the pool did not answer, recorded encrypted", encRecord, unknown, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := DecideSend(c.record, c.st)
			if c.refuse {
				if !errors.Is(err, ErrNotFerrysKey) {
					t.Fatalf("DecideSend = %+v, %v; want refused (ErrNotFerrysKey)", v, err)
				}
				return
			}
			if err != nil || v.Raw != c.raw {
				t.Fatalf("DecideSend = %+v, %v; want raw %v", v, err, c.raw)
			}
			if want := !c.raw && c.st.Encrypted(); v.ParentEncrypted != want {
				t.Fatalf("DecideSend = %+v; want ParentEncrypted %v", v, want)
			}
		})
	}
}

func TestAReceivedCopyRecordsWhatItsStreamWas(t *testing.T) {
	if rec, err := RecordReceived(true, ownRoot); err != nil || rec != encRecord {
		t.Fatalf("a raw stream: %q, %v", rec, err)
	}
	for name, st := range map[string]Stored{"plaintext": plainPool, "under an encrypted parent": inherited} {
		rec, err := RecordReceived(false, st)
		if err != nil || rec != "" {
			t.Fatalf("a plaintext stream landed %s: %q, %v; want no record (as on main)", name, rec, err)
		}
		if v, err := DecideSend(rec, st); err != nil || v.Raw {
			t.Fatalf("a plaintext copy landed %s, sent on: %+v, %v; want sent as an ordinary volume", name, v, err)
		}
	}
	for name, st := range map[string]Stored{"plaintext": plainPool, "under an encrypted parent": inherited, "unknown": unknown} {
		if rec, err := RecordReceived(true, st); !errors.Is(err, ErrNotFerrysKey) {
			t.Errorf("a raw stream that landed %s: %q, %v; want refused", name, rec, err)
		}
	}
	// The record a copy gets is the one its sends read: a raw copy is
	// sent raw in turn, a plaintext one plain.
	rec, _ := RecordReceived(true, ownRoot)
	if v, err := DecideSend(rec, ownRoot); err != nil || !v.Raw {
		t.Fatalf("a raw copy sent on: %+v, %v", v, err)
	}
}

func TestAPublishLoadsTheKeyOfAVolumeFerryEncryptedOnly(t *testing.T) {
	good := map[string]string{"key": "correct horse battery"}
	cases := []struct {
		name    string
		record  string
		st      Stored
		secrets map[string]string
		needed  bool
		invalid bool // InvalidArgument
		refused bool // ErrNotFerrysKey
	}{
		{"plaintext: no key, whatever the Secret", "off", plainPool, good, false, false, false},
		{"plaintext from before the record", "", plainPool, nil, false, false, false},
		{"a secondary's copy becoming the primary", encRecord, ownRoot, good, true, false, false},
		{"the key already loaded here: still checked, mounted", encRecord, ownRootOpen, good, true, false, false},
		{"the key already loaded here, no Secret", encRecord, ownRootOpen, nil, false, true, false},
		{"the key already loaded here, a key too short", encRecord, ownRootOpen, map[string]string{"key": "short"}, false, true, false},
		{"an encrypted parent's key, no record", "", inherited, nil, false, false, false},
		{"no Secret", encRecord, ownRoot, nil, false, true, false},
		{"a Secret without the key field", encRecord, ownRoot, map[string]string{"passphrase": "correct horse battery"}, false, true, false},
		{"a key too short", encRecord, ownRoot, map[string]string{"key": "short"}, false, true, false},
		{"an encrypted parent's key: the operator's", "off", inherited, nil, false, false, false},
		{"its own root without Ferry's record", "", ownRoot, good, false, false, true},
		{"its own root recorded plaintext", "off", ownRoot, good, false, false, true},
		{"recorded encrypted, the pool says plaintext", encRecord, plainPool, good, false, false, true},
		{"recorded encrypted, a parent's key", encRecord, inherited, good, false, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := KeyToLoad(c.record, c.st, c.secrets)
			switch {
			case c.invalid:
				if !isInvalid(err, "secrets.key") {
					t.Fatalf("KeyToLoad = %+v, %v; want InvalidError on secrets.key", v, err)
				}
			case c.refused:
				if !errors.Is(err, ErrNotFerrysKey) {
					t.Fatalf("KeyToLoad = %+v, %v; want ErrNotFerrysKey", v, err)
				}
			case err != nil || v.Needed != c.needed:
				t.Fatalf("KeyToLoad = %+v, %v; want needed %v", v, err, c.needed)
			}
			if v.Needed && string(v.Key.Bytes()) != c.secrets["key"] {
				t.Fatal("the key to load is not the Secret's")
			}
		})
	}
}

func TestAnEncryptionRecordRoundTrips(t *testing.T) {
	for _, e := range []Encryption{{}, {"aes-256-gcm", KeyPassphrase}, {"aes-128-ccm", KeyRaw}, {"aes-192-gcm", KeyHex}} {
		got, ok := ParseEncryptionRecord(e.Record())
		if !ok || got != e {
			t.Errorf("%q read back as %+v, %v", e.Record(), got, ok)
		}
	}
	for _, bad := range []string{"", "on", "aes-256-gcm", "aes-256-gcm/", "/passphrase", "aes-256-gcm/file", "rot13/raw"} {
		if _, ok := ParseEncryptionRecord(bad); ok {
			t.Errorf("%q was read as a record", bad)
		}
	}
}

func TestACopyIsRefusedOnlyForWhatIsNotAnOrdinaryVolume(t *testing.T) {
	cases := []struct {
		name      string
		record    string
		st        Stored
		encrypted bool
	}{
		{"plaintext", "", plainPool, false},
		{"encrypted by a parent: copied as before", "", inherited, false},
		{"encrypted by a parent, recorded off", "off", inherited, false},
		{"Ferry-encrypted", encRecord, ownRoot, true},
		{"its own root without Ferry's record", "", ownRoot, true},
		{"the pool did not answer", "", unknown, true},
	}
	for _, c := range cases {
		if got := Encrypted(c.record, c.st); got != c.encrypted {
			t.Errorf("%s: Encrypted = %v, want %v", c.name, got, c.encrypted)
		}
	}
}

// The example Secret (deploy/examples/encrypted-storageclass.yaml) holds
// the placeholder "CHANGE": it must fail validation in every key format,
// so that no volume is encrypted with a key copied from the example.
func TestTheExampleSecretsPlaceholderIsNoKey(t *testing.T) {
	for _, f := range []KeyFormat{KeyPassphrase, KeyRaw, KeyHex} {
		if _, err := ParseKey(f, map[string]string{SecretKeyField: "CHANGE"}); err == nil {
			t.Errorf("keyformat %s accepts the example's placeholder", f)
		}
	}
}
