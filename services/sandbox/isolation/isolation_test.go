package isolation

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestSandboxArgs(t *testing.T) {
	got := Sandbox{
		InfoFD:    5,
		System:    []string{"--ro-bind", "/usr", "/usr"},
		In:        "/work/x/in",
		Binds:     []string{"--ro-bind", "/work/x/net", "/nova-net"},
		DiskBytes: 1 << 20,
		Env:       []string{"PATH=/usr/bin", "A=b=c"},
	}.Args()
	want := []string{
		"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--hostname", "nova-sandbox", "--info-fd", "5",
		"--ro-bind", "/usr", "/usr",
		"--proc", "/proc", "--dev", "/dev", "--ro-bind", "/work/x/in", "/nova",
		"--ro-bind", "/work/x/net", "/nova-net",
		"--size", "1048576", "--tmpfs", "/tmp", "--chdir", "/tmp",
		"--clearenv", "--setenv", "PATH", "/usr/bin", "--setenv", "A", "b=c",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Args:\n got %q\nwant %q", got, want)
	}
}

func TestSystemMounts(t *testing.T) {
	args, err := SystemMounts("/etc/mime.types")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(args[:3], []string{"--ro-bind", "/usr", "/usr"}) {
		t.Errorf("first mount %q, want /usr read-only", args[:3])
	}
	if !slices.Equal(args[len(args)-3:], []string{"--ro-bind-try", "/etc/mime.types", "/etc/mime.types"}) {
		t.Errorf("last mount %q, want the extra /etc file", args[len(args)-3:])
	}
	for _, secret := range []string{"/etc", "/etc/passwd", "/etc/shadow", "/etc/ssl/private"} {
		if slices.Contains(args, secret) {
			t.Errorf("%s is mounted: %q", secret, args)
		}
	}
}

func TestCheckSearchable(t *testing.T) {
	other := &syscall.Credential{Uid: 65534, Gid: 65534}
	if os.Getuid() == 65534 {
		t.Skip("the test runs as the other user")
	}
	owner := &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
	tests := []struct {
		name    string
		mode    os.FileMode
		cred    *syscall.Credential
		wantErr bool
	}{
		{"owner", 0o700, owner, false},
		{"other without x", 0o700, other, true},
		{"other with x", 0o711, other, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not under t.TempDir, whose parent only its owner can search.
			sub, err := os.MkdirTemp("", "nova-isolation-test-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(sub) })
			if err := os.Chmod(sub, tt.mode); err != nil {
				t.Fatal(err)
			}
			err = CheckSearchable(sub, tt.cred)
			if (err != nil) != tt.wantErr {
				t.Errorf("CheckSearchable(%o, uid %d) = %v, want error %v", tt.mode, tt.cred.Uid, err, tt.wantErr)
			}
		})
	}
	if err := CheckSearchable(filepath.Join(t.TempDir(), "none"), owner); err == nil {
		t.Error("a missing dir passed")
	}
}

func TestRemoveTree(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	locked := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(locked, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(locked, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// What code in the sandbox may leave: directories without write or search permission.
	for _, p := range []string{locked, filepath.Dir(locked)} {
		if err := os.Chmod(p, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveTree(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", dir, err)
	}
}

// A pipe still held open by a process that escaped the sandbox must not keep
// the run waiting past the deadline.
func TestAwaitReadersClosesHeldPipes(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close() // the escaped writer
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.Copy(io.Discard, r) })
	AwaitReaders(&wg, time.Now().Add(50*time.Millisecond), r)
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, os.ErrClosed) {
		t.Errorf("the pipe was not closed at the deadline: read err %v", err)
	}
}
