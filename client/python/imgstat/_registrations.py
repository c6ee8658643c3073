"""The regions one client has registered with its server: the region
socket, memfds kept for copies of arrays, files passed once, GPU
allocations; each given back when its memory goes or the client closes."""
from __future__ import annotations

import collections
import os
import threading
import weakref

from ._regions import Memory, RegionSocket
from ._tuning import CUDA_REGIONS, SCRATCH_IDLE, SCRATCH_IDLE_BYTES
from .v1 import imgstat_pb2 as pb


class Registrations:
    def __init__(self, transport):
        self._transport = transport
        self._lock = threading.Lock()
        self._socket = None
        self._tried = False
        self._forgotten = []
        self._scratch = []          # idle Memory objects, registered
        self._cuda = collections.OrderedDict()  # IPC handle bytes -> region id, the latest last

    def close(self):
        with self._lock:
            scratch, self._scratch = self._scratch, []
        for m in scratch:
            entry = m.registered.pop(id(self), None)
            if entry:
                self._forgotten.append(entry[1])
        self.flush()
        if self._socket is not None:
            self._socket.close()  # the server drops every region it passed

    def socket(self):
        """The region socket connection, or None when regions cannot be had
        (another host, regions off, another mount namespace)."""
        if not self._transport.same_host:
            return None
        with self._lock:
            if self._tried:
                return self._socket
        info = self._transport.known_info()
        sock = None
        if info is not None and info.region_socket:
            try:
                sock = RegionSocket(info.region_socket)
            except OSError:
                sock = None
        with self._lock:
            if not self._tried:
                self._tried, self._socket = True, sock
            elif sock is not None:
                sock.close()
            return self._socket

    def forget(self, region_id):
        """A region whose memory is gone: given back at the next call."""
        self._forgotten.append(region_id)

    def flush(self):
        """The forgotten regions given back."""
        while self._forgotten:
            try:
                region_id = self._forgotten.pop()
            except IndexError:  # another thread took the last one
                return
            self._transport.unregister(region_id)

    def of_memory(self, memory, name, pageable=False):
        """The region of a memfd, registered the first time (pageable: not
        page-locked by a CUDA server); None when regions cannot be had."""
        key = (id(self), pageable)  # a scratch serves both ways: a region each
        entry = memory.registered.get(key)
        if entry is not None and entry[0]() is self:  # (an id is reused once its owner is gone)
            return entry[1]
        sock = self.socket()
        if sock is None:
            return None
        try:
            ticket = sock.pass_fd(memory.fd)
        except OSError:
            return None
        region_id = self._transport.register(ticket, name, pageable=pageable)
        memory.registered[key] = (weakref.ref(self), region_id)
        return region_id

    def of_file(self, path, name):
        """A file passed to the server and registered, to be forgotten after
        one call; None when it cannot be opened or passed."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            ticket = self.socket().pass_fd(fd)
        except OSError:
            return None
        finally:
            os.close(fd)
        return self._transport.register(ticket, name)

    def of_cuda(self, handle, size, name):
        """A GPU allocation's region by its IPC handle, registered the first
        time; the server's mapping keeps a freed allocation alive, so the
        oldest registrations go back (a new allocation has a new handle)."""
        with self._lock:
            region_id = self._cuda.get(handle)
            if region_id is not None:
                self._cuda.move_to_end(handle)
                return region_id
        ticket = self.socket().pass_fd(None)
        region_id = self._transport.register(ticket, name, pb.CudaIpcMemory(handle=handle, size=size))
        with self._lock:
            self._cuda[handle] = region_id
            while len(self._cuda) > CUDA_REGIONS:
                self.forget(self._cuda.popitem(last=False)[1])
        return region_id

    def take_scratch(self, nbytes, larger=False):
        """A kept memfd of at least nbytes, or a new one. At most about twice
        nbytes, unless larger: a region is the whole memfd, and a CUDA server
        page-locks all of it; a pageable one (the Aggregate calls' encoded
        files, in slices that shrink) costs nothing for being larger, and a
        fresh memfd a call (its pages made, passed, registered) cost a
        Python caller about 7 ms of CPU a call."""
        with self._lock:
            fits = [m for m in self._scratch if nbytes <= m.size and (larger or m.size <= 2 * nbytes + (1 << 20))]
            if fits:
                best = min(fits, key=lambda m: m.size)
                self._scratch.remove(best)
                return best
        return Memory(-(-nbytes // (1 << 20)) * (1 << 20), "imgstat-copy")

    def give_scratch(self, memory):
        with self._lock:
            self._scratch.append(memory)
            while len(self._scratch) > SCRATCH_IDLE or sum(m.size for m in self._scratch) > SCRATCH_IDLE_BYTES:
                old = self._scratch.pop(0)
                for pageable in (False, True):
                    entry = old.registered.pop((id(self), pageable), None)
                    if entry:
                        self._forgotten.append(entry[1])


