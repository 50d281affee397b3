/* The reference for `hakaru latency -l 14` (closed loop, blocking): the least a TCP_RR or
 * UDP_RR round trip can do, as a client and a server of its own, each one blocking loop on
 * one thread (TCP: no timeout, so no timer armed per wait) and no time stamps but the loop's.
 *
 * Client: send 14 bytes, receive 14 bytes, again, for SECONDS; prints round trips per second.
 * Server: receive, send the same bytes back. TCP: until the client closes, no timeout in the
 * loop. UDP: both ends wait with a 1 s receive timeout, so that a lost datagram cannot hang
 * them and the server stops by itself after SECONDS; that arms a timer per wait, as hakaru's
 * waits do, so the UDP reference is that much slower than the TCP one.
 *
 * Build: cc -O2 -o rr_loop bench/rr_loop.c
 * Run:   rr_loop server tcp|udp PORT SECONDS   and   rr_loop client tcp|udp HOST PORT SECONDS
 * (bench/rr_vs_netperf.py runs both, beside hakaru latency and netperf TCP_RR/UDP_RR). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define LEN 14

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int full(int fd, char *b, int tcp) {
    int k = 0;
    while (k < LEN) {
        int r = recv(fd, b + k, LEN - k, 0);
        if (r <= 0) return -1;
        if (!tcp) return r;
        k += r;
    }
    return k;
}

static int serve(int tcp, int port, double secs) {
    int l = socket(AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0), one = 1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, (struct sockaddr *)&a, sizeof a) != 0 || (tcp && listen(l, 16) != 0)) {
        perror("bind");
        return 1;
    }
    char b[LEN];
    double end = now() + secs;
    if (!tcp) {
        /* Bounded: stops by itself after SECONDS. */
        struct timeval tv = {1, 0};
        setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        struct sockaddr_in from;
        while (now() < end) {
            socklen_t fl = sizeof from;
            int n = recvfrom(l, b, LEN, 0, (struct sockaddr *)&from, &fl);
            if (n > 0) sendto(l, b, n, 0, (struct sockaddr *)&from, fl);
        }
        return 0;
    }
    struct timeval tv = {1, 0};
    setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    while (now() < end) {
        int c = accept(l, NULL, NULL);
        if (c < 0) continue;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        /* Linux hands the accepted socket the listener's 1 s timeout: take it off. */
        struct timeval none = {0, 0};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
        /* One client at a time, served until it closes: no timeout inside the loop. */
        while (full(c, b, 1) == LEN && send(c, b, LEN, 0) == LEN) {
        }
        close(c);
    }
    close(l);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "server") == 0) {
        return serve(strcmp(argv[2], "tcp") == 0, atoi(argv[3]), atof(argv[4]));
    }
    if (argc != 6 || strcmp(argv[1], "client") != 0) {
        fprintf(stderr, "usage: %s server tcp|udp PORT SECONDS | client tcp|udp HOST PORT SECONDS\n",
                argv[0]);
        return 2;
    }
    int tcp = strcmp(argv[2], "tcp") == 0, one = 1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)atoi(argv[4]));
    if (inet_pton(AF_INET, argv[3], &a.sin_addr) != 1) {
        fprintf(stderr, "bad address %s\n", argv[3]);
        return 2;
    }
    int fd = socket(AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        perror("connect");
        return 1;
    }
    if (tcp) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* A lost UDP reply must not hang the client: 1 s receive timeout (lost datagrams are
     * counted as failures; on loopback there are none). */
    struct timeval tv = {1, 0};
    if (!tcp) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char b[LEN];
    memset(b, 'x', sizeof b);
    double secs = atof(argv[5]), start = now(), end = start + secs;
    long done = 0, failed = 0;
    while (now() < end) {
        if (send(fd, b, LEN, 0) != LEN) {
            failed++;
            break;
        }
        if (full(fd, b, tcp) == LEN) done++;
        else failed++;
    }
    printf("%.0f %ld\n", done / (now() - start), failed);
    close(fd);
    return 0;
}
