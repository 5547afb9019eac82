package ring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// addrOf is the address of p for an SQE field. The object p points into stays referenced from the
// operation's slot until its completion, and Go's heap does not move objects.
func addrOf[T any](p *T) uint64 { return uint64(uintptr(unsafe.Pointer(p))) }

// sockaddrToRaw writes sa in the kernel's layout into raw and returns its length. It knows IPv4,
// IPv6 and Unix addresses; it reports false for any other.
func sockaddrToRaw(sa unix.Sockaddr, raw *unix.RawSockaddrAny) (uint32, bool) {
	*raw = unix.RawSockaddrAny{}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(raw))
		p.Family = unix.AF_INET
		putPort(&p.Port, a.Port)
		p.Addr = a.Addr
		return unix.SizeofSockaddrInet4, true
	case *unix.SockaddrInet6:
		p := (*unix.RawSockaddrInet6)(unsafe.Pointer(raw))
		p.Family = unix.AF_INET6
		putPort(&p.Port, a.Port)
		p.Scope_id = a.ZoneId
		p.Addr = a.Addr
		return unix.SizeofSockaddrInet6, true
	case *unix.SockaddrUnix:
		p := (*unix.RawSockaddrUnix)(unsafe.Pointer(raw))
		if len(a.Name) >= len(p.Path) {
			return 0, false
		}
		p.Family = unix.AF_UNIX
		for i := 0; i < len(a.Name); i++ {
			p.Path[i] = int8(a.Name[i])
		}
		n := uint32(unsafe.Offsetof(p.Path)) + uint32(len(a.Name))
		if len(a.Name) > 0 && a.Name[0] != '@' {
			n++ // a pathname address counts its NUL
		}
		if len(a.Name) > 0 && a.Name[0] == '@' {
			p.Path[0] = 0 // abstract socket
		}
		return n, true
	}
	return 0, false
}

// putPort stores port in network byte order.
func putPort(dst *uint16, port int) {
	b := (*[2]byte)(unsafe.Pointer(dst))
	b[0], b[1] = byte(port>>8), byte(port)
}
