package volume

import (
	"errors"
	"fmt"
	"strings"
)

// ZFS native encryption (issue 24, point 3). A StorageClass may ask for an
// encrypted volume: Ferry then creates its dataset as its own encryption
// root, with the key from the StorageClass's Secret, and records that
// decision on the dataset (Encryption.Record). Every copy of such a volume
// is sent raw, so the nodes holding secondaries receive ciphertext and
// never the key; the key is loaded only where the volume is published.
//
// The rules here are pure: what a StorageClass may ask, what a key must
// look like, how a volume is sent, what a received copy records, and
// whether a publish must load a key. The ZFS adapter carries them out.

// StorageClass parameter keys of encryption.
const (
	// ParamEncryption: "off" (the default), "on" (= DefaultCipher) or a
	// cipher of Ciphers.
	ParamEncryption = "encryption"
	// ParamKeyFormat: "passphrase" (the default), "raw" or "hex".
	ParamKeyFormat = "keyformat"
)

// SecretKeyField is the field of the StorageClass's Secrets (the
// provisioner's and the node-publish one) that holds the key.
const SecretKeyField = "key"

// DefaultCipher is what "encryption: on" means (OpenZFS's own default
// for "on" since 0.8.4).
const DefaultCipher = "aes-256-gcm"

// Ciphers are the ciphers a StorageClass may name.
var Ciphers = []string{"aes-128-ccm", "aes-192-ccm", "aes-256-ccm", "aes-128-gcm", "aes-192-gcm", "aes-256-gcm"}

// KeyFormat is how a key is written (ZFS's keyformat).
type KeyFormat string

const (
	// KeyPassphrase: 8 to 512 bytes, stretched by PBKDF2 by ZFS.
	KeyPassphrase KeyFormat = "passphrase"
	// KeyRaw: exactly 32 bytes.
	KeyRaw KeyFormat = "raw"
	// KeyHex: exactly 64 hexadecimal characters (32 bytes).
	KeyHex KeyFormat = "hex"
)

// Key lengths ZFS accepts, per format.
const (
	MinPassphrase = 8
	MaxPassphrase = 512
	RawKeyBytes   = 32
	HexKeyChars   = 64
)

// recordOff is the record of a volume Ferry created unencrypted.
const recordOff = "off"

// Encryption is what a volume's StorageClass asks: no encryption when
// Cipher is empty.
type Encryption struct {
	Cipher    string
	KeyFormat KeyFormat
}

// On reports whether the volume is to be encrypted.
func (e Encryption) On() bool { return e.Cipher != "" }

// Record is how the decision is recorded on the volume's dataset
// (ports.MetaEncryption): "off", or "<cipher>/<keyformat>".
func (e Encryption) Record() string {
	if !e.On() {
		return recordOff
	}
	return e.Cipher + "/" + string(e.KeyFormat)
}

// ParseEncryptionRecord reads a record written by Record. ok is false for
// a missing or malformed record: nothing is known of Ferry's decision.
func ParseEncryptionRecord(s string) (e Encryption, ok bool) {
	if s == recordOff {
		return Encryption{}, true
	}
	cipher, format, found := strings.Cut(s, "/")
	if !found || !contains(Ciphers, cipher) || !validFormat(KeyFormat(format)) {
		return Encryption{}, false
	}
	return Encryption{Cipher: cipher, KeyFormat: KeyFormat(format)}, true
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func validFormat(f KeyFormat) bool { return f == KeyPassphrase || f == KeyRaw || f == KeyHex }

// parseEncryption reads the two StorageClass keys (either may be absent).
func parseEncryption(in map[string]string) (Encryption, error) {
	enc, hasEnc := in[ParamEncryption]
	format, hasFormat := in[ParamKeyFormat]
	var e Encryption
	switch {
	case !hasEnc || enc == "off":
	case enc == "on":
		e.Cipher = DefaultCipher
	case contains(Ciphers, enc):
		e.Cipher = enc
	default:
		return Encryption{}, invalid("parameters."+ParamEncryption, enc, "must be off, on or one of "+strings.Join(Ciphers, ", "))
	}
	if !e.On() {
		if hasFormat {
			return Encryption{}, invalid("parameters."+ParamKeyFormat, format, "is only allowed with "+ParamEncryption+" on")
		}
		return e, nil
	}
	e.KeyFormat = KeyPassphrase
	if hasFormat {
		if !validFormat(KeyFormat(format)) {
			return Encryption{}, invalid("parameters."+ParamKeyFormat, format, "must be passphrase, raw or hex")
		}
		e.KeyFormat = KeyFormat(format)
	}
	return e, nil
}

// Key is key material. It prints as "[redacted]" whatever the verb, so
// that no log line, error or event can carry it by accident; only Bytes
// gives it, for the one place that hands it to ZFS on stdin.
type Key struct{ b []byte }

// Bytes returns a copy of the key material.
func (k Key) Bytes() []byte { return append([]byte(nil), k.b...) }

// Empty reports whether there is no key.
func (k Key) Empty() bool { return len(k.b) == 0 }

const redacted = "[redacted]"

func (Key) String() string   { return redacted }
func (Key) GoString() string { return redacted }

// Format makes %v, %+v, %#v, %s, %q and %x print "[redacted]" too.
func (Key) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// ParseKey takes the key from a Secret's fields (SecretKeyField) and
// checks its length for format. A missing field or a key of the wrong
// length is an *InvalidError that names the field and the rule, never the
// value nor its length.
func ParseKey(format KeyFormat, secrets map[string]string) (Key, error) {
	field := "secrets." + SecretKeyField
	v, ok := secrets[SecretKeyField]
	if !ok || v == "" {
		return Key{}, &InvalidError{Field: field, Reason: fmt.Sprintf("an encrypted volume needs its key in the Secret's field %q (the StorageClass names the Secret)", SecretKeyField)}
	}
	switch format {
	case KeyRaw:
		if len(v) != RawKeyBytes {
			return Key{}, &InvalidError{Field: field, Reason: fmt.Sprintf("keyformat raw needs exactly %d bytes", RawKeyBytes)}
		}
	case KeyHex:
		if len(v) != HexKeyChars || !isHex(v) {
			return Key{}, &InvalidError{Field: field, Reason: fmt.Sprintf("keyformat hex needs exactly %d hexadecimal characters", HexKeyChars)}
		}
	case KeyPassphrase:
		if len(v) < MinPassphrase || len(v) > MaxPassphrase {
			return Key{}, &InvalidError{Field: field, Reason: fmt.Sprintf("keyformat passphrase needs %d to %d bytes", MinPassphrase, MaxPassphrase)}
		}
		if strings.ContainsAny(v, "\n\x00") {
			// ZFS reads a passphrase from stdin up to a newline: a
			// newline or NUL inside would load a different key.
			return Key{}, &InvalidError{Field: field, Reason: "a passphrase may not contain a newline or NUL"}
		}
	default:
		return Key{}, &InvalidError{Field: "keyformat", Value: truncate(string(format)), Reason: "unknown key format"}
	}
	return Key{b: []byte(v)}, nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9') && !('a' <= c && c <= 'f') && !('A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// Stored is what the pool says of a dataset's encryption.
type Stored struct {
	// Known: the pool answered. A pool that cannot encrypt (zfs-fuse)
	// answers for certain: Cipher "off".
	Known bool
	// Cipher is ZFS's encryption property: "off" or the cipher.
	Cipher string
	// OwnRoot: the dataset is its own encryptionroot (its key is its own,
	// not an encrypted parent's).
	OwnRoot bool
	// KeyFormat is ZFS's keyformat ("none" when not encrypted).
	KeyFormat KeyFormat
	// KeyLoaded: keystatus is available. A secondary of an encrypted
	// volume never has it: its copy was received raw.
	KeyLoaded bool
}

// Encrypted reports whether ZFS says the dataset is encrypted (or cannot
// tell: then it may be, and is treated so).
func (s Stored) Encrypted() bool { return !s.Known || s.Cipher != recordOff }

// ErrNotFerrysKey refuses to send or publish a dataset whose encryption
// Ferry did not set up itself, or whose record disagrees with the pool.
var ErrNotFerrysKey = errors.New("encryption not managed by Ferry")

// SendVerdict says how a volume's snapshots are streamed.
type SendVerdict struct {
	// Raw: `zfs send -w`, the blocks as stored, encrypted; the receiver
	// needs no key and gets none.
	Raw bool
	// ParentEncrypted: an ordinary volume (no record, or recorded off)
	// under an encrypted parent dataset: at rest it is encrypted with
	// the parent's key, which the operator manages; it is sent as before
	// encryption (not raw: decrypted, over the peers' mTLS).
	ParentEncrypted bool
}

// DecideSend is the rule of every stream of a volume (full, incremental,
// resumed, a replacement's, a copy kept aside):
//
//   - Ferry-encrypted (Ferry's record says encrypted AND the dataset is
//     its own encryption root): raw, always;
//   - an ordinary volume (no record, or recorded off): not raw, exactly as
//     before encryption, plaintext or encrypted by an encrypted parent
//     (its encryptionroot is not itself: the key is the parent's, the
//     operator's, and the receiving node's parent holds one too);
//   - everything else fails closed (ErrNotFerrysKey): a record saying
//     encrypted that the pool contradicts (plaintext, or a parent's key),
//     a dataset that is its own encryption root without Ferry's record,
//     an unreadable record on an encrypted dataset, or a pool that did
//     not say.
func DecideSend(record string, st Stored) (SendVerdict, error) {
	rec, ok := ParseEncryptionRecord(record)
	ferry := ok && rec.On()
	ordinary := record == "" || (ok && !rec.On())
	switch {
	case !st.Known:
		return SendVerdict{}, fmt.Errorf("the pool did not say whether the dataset is encrypted: not sent: %w", ErrNotFerrysKey)
	case ferry && !st.Encrypted():
		return SendVerdict{}, fmt.Errorf("recorded as encrypted (%s) but the dataset is not: not sent: %w", record, ErrNotFerrysKey)
	case ferry && !st.OwnRoot:
		return SendVerdict{}, fmt.Errorf("recorded as encrypted but not its own encryption root (its key is a parent's): not sent: %w", ErrNotFerrysKey)
	case ferry:
		return SendVerdict{Raw: true}, nil
	case !st.Encrypted():
		// Plaintext, recorded so or never recorded: as before.
		return SendVerdict{}, nil
	case st.OwnRoot:
		return SendVerdict{}, fmt.Errorf("its own encryption root (%s) without Ferry's record of it (record %q): never sent decrypted, nor raw with a key Ferry does not manage: %w", st.Cipher, record, ErrNotFerrysKey)
	case ordinary:
		return SendVerdict{ParentEncrypted: true}, nil
	}
	return SendVerdict{}, fmt.Errorf("encrypted (%s) with an unreadable record of Ferry's: not sent: %w", st.Cipher, ErrNotFerrysKey)
}

// RecordReceived is the record a copy gets after a full stream landed
// (streams carry no user properties): a raw stream must have made the copy
// its own encryption root, and records its cipher and key format; a
// plaintext stream records nothing ("": the copy's properties are those of
// a copy before encryption, and DecideSend sends it as an ordinary
// volume). Anything else is an error: the copy is not kept as Ferry's.
func RecordReceived(raw bool, st Stored) (string, error) {
	if !raw {
		return "", nil
	}
	if !st.Known || !st.Encrypted() || !st.OwnRoot || !contains(Ciphers, st.Cipher) || !validFormat(st.KeyFormat) {
		return "", fmt.Errorf("a raw stream did not land as its own encryption root (encryption %q, own root %v, keyformat %q): %w", st.Cipher, st.OwnRoot, st.KeyFormat, ErrNotFerrysKey)
	}
	return Encryption{Cipher: st.Cipher, KeyFormat: st.KeyFormat}.Record(), nil
}

// KeyVerdict says whether a publish must ensure the volume's key is
// loaded (and its filesystem mounted) first, with which key.
type KeyVerdict struct {
	Needed bool
	Key    Key
}

// KeyToLoad decides, for a publish, whether the volume's key must be
// ensured (checked, loaded if it is not, and the filesystem mounted) and
// checks the key the node-publish Secret gave. A Ferry-encrypted volume
// needs it on every publish, also where its key is already loaded (a
// wrong Secret must fail on the creating node too, not only at failover;
// a loaded key does not mean a mounted filesystem): missing or malformed
// is *InvalidError. A plaintext volume needs none, whatever the Secret
// says; a dataset encrypted by its parent (the operator's key) needs none
// from Ferry. A record that claims encryption the pool does not show, or
// an own encryption root whose record is missing, is ErrNotFerrysKey.
func KeyToLoad(record string, st Stored, secrets map[string]string) (KeyVerdict, error) {
	rec, ok := ParseEncryptionRecord(record)
	switch {
	case ok && rec.On() && st.Known && st.Encrypted() && st.OwnRoot:
		key, err := ParseKey(rec.KeyFormat, secrets)
		if err != nil {
			return KeyVerdict{}, err
		}
		return KeyVerdict{Needed: true, Key: key}, nil
	case ok && rec.On():
		return KeyVerdict{}, fmt.Errorf("recorded as encrypted (%s) but the pool shows encryption %q, own root %v: %w", record, st.Cipher, st.OwnRoot, ErrNotFerrysKey)
	case st.Known && st.Encrypted() && st.OwnRoot:
		return KeyVerdict{}, fmt.Errorf("its own encryption root without Ferry's record of it (record %q): Ferry does not load a key it did not set: %w", record, ErrNotFerrysKey)
	}
	return KeyVerdict{}, nil
}

// Encrypted reports whether a volume is Ferry-encrypted, or cannot be
// sent as an ordinary volume (DecideSend refuses it): a copy of it must
// then not be made as if plain. An ordinary volume under an encrypted
// parent is not: it is copied as before encryption.
func Encrypted(record string, st Stored) bool {
	v, err := DecideSend(record, st)
	return err != nil || v.Raw
}
