/* A plain TCP byte relay, the floor for scripts/bench-proxy: nothing is parsed.
 *
 *     bench-relay LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT
 *
 * Listens on 127.0.0.1:LISTEN_PORT; for every client it connects to the upstream and
 * copies bytes both ways, each direction a thread of its own doing blocking read()/write()
 * with a 64 KiB buffer (what one read brings is written before the next read), TCP_NODELAY
 * on both sockets. When one side closes its sending half, the other side's sending half
 * is shut down; the pair is closed once both directions have ended. Prints
 * "listening on PORT" to stderr when ready, and when a direction ends, what it did:
 *     bench-relay: connection 3 down: reads 1234 bytes 567890 cpu_us 4567 nvcsw 1200 nivcsw 3
 * (reads that brought data; the thread's CPU and context switches from getrusage
 * RUSAGE_THREAD). With BENCH_RELAY_EPOLL=1 in its environment, each direction reads as tokio
 * does instead: a non-blocking socket, an epoll_wait before each read that follows a short
 * one (a wakeup costs an epoll_wait more, as the proxy's does). Built by scripts/bench-proxy:
 *     gcc -O2 -pthread -o bench-relay bench-relay.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>

#define BUF (64 * 1024)

static int use_epoll; /* BENCH_RELAY_EPOLL=1 */
static const char *up_host;
static const char *up_port;

struct pair {
    long id;
    int client, server;
    int ended; /* directions ended, under lock */
    pthread_mutex_t lock;
};

struct dir {
    struct pair *pair;
    int from, to;
    const char *name;
};

static void nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void finish(struct pair *p) {
    pthread_mutex_lock(&p->lock);
    int both = ++p->ended == 2;
    pthread_mutex_unlock(&p->lock);
    if (both) {
        close(p->client);
        close(p->server);
        pthread_mutex_destroy(&p->lock);
        free(p);
    }
}

/* Copies from -> to until EOF or an error. */
static void *copy(void *arg) {
    struct dir d = *(struct dir *)arg;
    free(arg);
    char *buf = malloc(BUF);
    int failed = 0;
    long reads = 0, bytes = 0;
    int ep = -1, wait = 0;
    if (use_epoll) {
        ep = epoll_create1(EPOLL_CLOEXEC);
        fcntl(d.from, F_SETFL, fcntl(d.from, F_GETFL) | O_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLET | EPOLLRDHUP};
        epoll_ctl(ep, EPOLL_CTL_ADD, d.from, &ev);
        wait = 1;
    }
    for (;;) {
        if (wait) {
            struct epoll_event got;
            if (epoll_wait(ep, &got, 1, -1) < 0 && errno != EINTR) {
                failed = 1;
                break;
            }
        }
        ssize_t n = read(d.from, buf, BUF);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN && use_epoll) {
                wait = 1;
                continue;
            }
            failed = 1;
            break;
        }
        /* As tokio: a short read drained the socket; the next read waits for readiness. */
        wait = use_epoll && n < BUF;
        reads++;
        bytes += n;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(d.to, buf + off, (size_t)(n - off));
            if (w < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN) {
                    /* Non-blocking (the other direction's epoll): wait until writable. */
                    struct pollfd out = {.fd = d.to, .events = POLLOUT};
                    poll(&out, 1, -1);
                    continue;
                }
                failed = 1;
                goto out;
            }
            off += w;
        }
    }
out:
    free(buf);
    if (ep >= 0) close(ep);
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    fprintf(stderr, "bench-relay: connection %ld %s: reads %ld bytes %ld cpu_us %ld nvcsw %ld nivcsw %ld\n",
            d.pair->id, d.name, reads, bytes,
            (long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000L + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec,
            ru.ru_nvcsw, ru.ru_nivcsw);
    if (failed) {
        /* Wake the other direction too: the pair is over. */
        shutdown(d.from, SHUT_RDWR);
        shutdown(d.to, SHUT_RDWR);
    } else {
        shutdown(d.to, SHUT_WR);
    }
    finish(d.pair);
    return NULL;
}

static int connect_upstream(void) {
    struct addrinfo hints = {0}, *res, *ai;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(up_host, up_port, &hints, &res) != 0) return -1;
    int fd = -1;
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

static long connections;

static void *serve(void *arg) {
    int client = (int)(long)arg;
    int server = connect_upstream();
    if (server < 0) {
        perror("bench-relay: upstream");
        close(client);
        return NULL;
    }
    nodelay(client);
    nodelay(server);
    struct pair *p = calloc(1, sizeof *p);
    p->id = __atomic_add_fetch(&connections, 1, __ATOMIC_SEQ_CST);
    p->client = client;
    p->server = server;
    pthread_mutex_init(&p->lock, NULL);
    struct dir *up = malloc(sizeof *up), *down = malloc(sizeof *down);
    *up = (struct dir){p, client, server, "up"};
    *down = (struct dir){p, server, client, "down"};
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    if (pthread_create(&t, &attr, copy, up) != 0) {
        perror("bench-relay: thread");
        close(client);
        close(server);
        free(up);
        free(down);
        free(p);
        return NULL;
    }
    pthread_attr_destroy(&attr);
    return copy(down); /* this thread carries upstream -> client */
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT\n", argv[0]);
        return 2;
    }
    const char *e = getenv("BENCH_RELAY_EPOLL");
    use_epoll = e && strcmp(e, "1") == 0;
    up_host = argv[2];
    up_port = argv[3];
    signal(SIGPIPE, SIG_IGN);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons((unsigned short)atoi(argv[1]));
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(lfd, 1024) != 0) {
        perror("bench-relay: listen");
        return 1;
    }
    socklen_t len = sizeof addr;
    getsockname(lfd, (struct sockaddr *)&addr, &len);
    fprintf(stderr, "bench-relay: listening on %d\n", ntohs(addr.sin_port));
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (;;) {
        int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            perror("bench-relay: accept");
            sleep(1);
            continue;
        }
        pthread_t t;
        if (pthread_create(&t, &attr, serve, (void *)(long)c) != 0) {
            perror("bench-relay: thread");
            close(c);
        }
    }
}
