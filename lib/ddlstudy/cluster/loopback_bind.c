/* ddlstudy's loopback shim (ddlstudy.cluster.loopback): loaded with LD_PRELOAD into the engines
 * of a local cluster so that a TCP listener asked for on every interface listens on the
 * cluster's own address instead. Why: TensorFlow's gRPC server binds "0.0.0.0:<port>" whatever
 * the cluster spec names (grpc_server_lib.cc; neither TF nor gRPC has an option for it).
 *
 * bind() of a TCP socket to INADDR_ANY or in6addr_any is rewritten to DDLSTUDY_BIND_ADDR, else
 * DDLSTUDY_HOST_IP (the address the cluster gives the engine: 127.0.0.1 locally, its veth address
 * in an emulated network), else 127.0.0.1, read at each call. On a dual-stack IPv6 socket an IPv4
 * address is bound v4-mapped (::ffff:127.0.0.1), so IPv4 peers still connect; on a v6-only
 * socket with an IPv4 target it binds ::1. The port is kept. Binds to a named address, UDP and
 * other families are passed through unchanged. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

static const char *target(void) {
    const char *a = getenv("DDLSTUDY_BIND_ADDR");
    if (!a || !*a) a = getenv("DDLSTUDY_HOST_IP");
    return (a && *a) ? a : "127.0.0.1";
}

static int is_stream(int fd) {
    int type = 0;
    socklen_t len = sizeof type;
    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real;
    if (!real) real = (bind_fn)dlsym(RTLD_NEXT, "bind");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    if (!addr || !is_stream(fd)) return real(fd, addr, len);
    const char *t = target();
    struct in_addr a4;
    struct in6_addr a6;
    int is4 = inet_pton(AF_INET, t, &a4) == 1;
    int is6 = !is4 && inet_pton(AF_INET6, t, &a6) == 1;
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in v4;
        memcpy(&v4, addr, sizeof v4);
        if (v4.sin_addr.s_addr != htonl(INADDR_ANY)) return real(fd, addr, len);
        v4.sin_addr.s_addr = is4 ? a4.s_addr : htonl(INADDR_LOOPBACK);
        return real(fd, (const struct sockaddr *)&v4, sizeof v4);
    }
    if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 v6;
        memcpy(&v6, addr, sizeof v6);
        if (!IN6_IS_ADDR_UNSPECIFIED(&v6.sin6_addr)) return real(fd, addr, len);
        int only = 1;
        socklen_t olen = sizeof only;
        if (getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &only, &olen) != 0) only = 1;
        if (is6) {
            v6.sin6_addr = a6;
        } else if (is4 && !only) {
            memset(&v6.sin6_addr, 0, sizeof v6.sin6_addr);
            v6.sin6_addr.s6_addr[10] = 0xff;
            v6.sin6_addr.s6_addr[11] = 0xff;
            memcpy(&v6.sin6_addr.s6_addr[12], &a4, 4);
        } else {
            v6.sin6_addr = in6addr_loopback;
        }
        return real(fd, (const struct sockaddr *)&v6, sizeof v6);
    }
    return real(fd, addr, len);
}
