package agent

// Design note: the descriptors the verbs registry holds (ARCHITECTURE.md,
// "Limits").
//
// Every QP holds its memfd, every region one memfd per segment and every
// UD lane its memfd (in its sender's container), for as long as they live, so that the agent can hand them to peers. Left alone,
// a container at the device's limits would hold 4096 + 65536 × 16 of them,
// more than the agent's file limit has for all containers together. So
// each container's held descriptors are counted against a cap of their
// own, and a file is held once however many QPs, regions and segments name
// it: the provider sends the same memfd again for a region that shares
// pages with an earlier one. A file is its inode (fstat: device and inode
// number) and the mode it was opened in, so a descriptor opened read-only
// never stands in for one that may be mapped writable. The last user to go
// closes it.

import (
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// DefaultVerbsFDs is how many distinct memfds one container's QPs and
// regions may hold at the agent: what the file limit fits for every
// container of a /24 at its full share of sessions and the rest, within
// the kernel's default fs.nr_open (TestVerbsFDsFitDefaultNrOpen). A file
// limit short of that lowers it with the session share (limits.go).
const DefaultVerbsFDs = 2048

// fileKey names a held file: its inode and the mode it was opened in.
type fileKey struct {
	dev, ino uint64
	acc      int
}

// heldFile is one descriptor the registry keeps and how many use it.
type heldFile struct {
	fd    int
	users int
}

// holdFilesLocked returns the registry's descriptor for each of fds,
// holding one more use of each for container id: a file already held is
// shared, a new one is copied, unless the container would then hold more
// than limit files (LIMIT). On an error nothing is held.
func (r *verbsRegistry) holdFilesLocked(id string, fds []int, limit int) ([]fileKey, []int, error) {
	keys := make([]fileKey, 0, len(fds))
	held := make([]int, 0, len(fds))
	for _, fd := range fds {
		k, fd, err := r.holdFileLocked(id, fd, limit)
		if err != nil {
			r.releaseFilesLocked(id, keys)
			return nil, nil, err
		}
		keys, held = append(keys, k), append(held, fd)
	}
	return keys, held, nil
}

func (r *verbsRegistry) holdFileLocked(id string, fd, limit int) (fileKey, int, error) {
	k, err := fileKeyOf(fd)
	if err != nil {
		return fileKey{}, -1, err
	}
	hfd, err := r.holdKeyLocked(id, k, fd, limit)
	return k, hfd, err
}

// fileKeyOf names the file fd is, as held files are named.
func fileKeyOf(fd int) (fileKey, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fileKey{}, protocol.Errorf(protocol.CodeInvalid, "a descriptor cannot be read (fstat: %v); send a memfd", err)
	}
	acc, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return fileKey{}, protocol.Errorf(protocol.CodeInvalid, "a descriptor's mode cannot be read (%v); send a memfd", err)
	}
	return fileKey{dev: st.Dev, ino: st.Ino, acc: acc & unix.O_ACCMODE}, nil
}

// holdKeyLocked holds one more use of the file k, which fd is, for
// container id, and returns the registry's descriptor for it.
func (r *verbsRegistry) holdKeyLocked(id string, k fileKey, fd, limit int) (int, error) {
	files := r.files[id]
	if f := files[k]; f != nil {
		f.users++
		return f.fd, nil
	}
	if len(files) >= limit {
		return -1, protocol.Errorf(protocol.CodeLimit,
			"container %s holds %d memfds at the agent, its limit for QPs, memory regions and UD lanes together; destroy QPs or deregister regions (or register fewer, larger ones) before making more", id, limit)
	}
	nfd, err := dupFD(fd)
	if err != nil {
		return -1, err
	}
	if files == nil {
		files = map[fileKey]*heldFile{}
		r.files[id] = files
	}
	files[k] = &heldFile{fd: nfd, users: 1}
	return nfd, nil
}

// releaseFilesLocked gives back one use of each file keys names for
// container id, closing those no one uses any more.
func (r *verbsRegistry) releaseFilesLocked(id string, keys []fileKey) {
	files := r.files[id]
	for _, k := range keys {
		f := files[k]
		if f == nil {
			continue
		}
		if f.users--; f.users <= 0 {
			unix.Close(f.fd)
			delete(files, k)
		}
	}
	if len(files) == 0 {
		delete(r.files, id)
	}
}

// releaseFiles is releaseFilesLocked with the lock taken.
func (r *verbsRegistry) releaseFiles(id string, keys []fileKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releaseFilesLocked(id, keys)
}
