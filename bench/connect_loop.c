/* The reference for `hakaru connect -P 1`: the least a TCP_CRR round can do, as a client and
 * a server of its own, each one blocking loop on one thread.
 *
 * rst (default): client: socket, connect, a 1-byte request, the 1-byte response, close with
 * RST (SO_LINGER 0), again, for SECONDS; prints connections per second and failures. Server:
 * accept, read the request, write the response, read to the client's close, close.
 * fin: the server closes first, as netserver does in TCP_CRR: it writes the response with
 * MSG_MORE and closes, so the FIN leaves with it; the client reads to that close, then closes.
 *
 * Build: cc -O2 -o connect_loop bench/connect_loop.c
 * Run:   connect_loop server PORT SECONDS [fin]   and   connect_loop client HOST PORT SECONDS [fin]
 * (bench/rr_vs_netperf.py runs both, beside hakaru connect against hakaru server). */
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

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int serve(int port, double secs, int fin) {
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 1024) != 0) {
        perror("listen");
        return 1;
    }
    /* Bounded: the server stops by itself after SECONDS (checked between connections). */
    struct timeval tv = {1, 0};
    setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    double end = now() + secs;
    char b;
    while (now() < end) {
        int c = accept(l, NULL, NULL);
        if (c < 0) continue;
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (fin) {
            if (read(c, &b, 1) == 1) send(c, &b, 1, MSG_MORE);
        } else if (read(c, &b, 1) == 1 && write(c, &b, 1) == 1) {
            while (read(c, &b, 1) > 0) {
            }
        }
        close(c);
    }
    close(l);
    return 0;
}

int main(int argc, char **argv) {
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "server") == 0) {
        return serve(atoi(argv[2]), atof(argv[3]), argc == 5 && strcmp(argv[4], "fin") == 0);
    }
    if ((argc != 5 && argc != 6) || strcmp(argv[1], "client") != 0) {
        fprintf(stderr, "usage: %s server PORT SECONDS [fin] | client HOST PORT SECONDS [fin]\n",
                argv[0]);
        return 2;
    }
    int fin = argc == 6 && strcmp(argv[5], "fin") == 0;
    argv++;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)atoi(argv[2]));
    if (inet_pton(AF_INET, argv[1], &a.sin_addr) != 1) {
        fprintf(stderr, "bad address %s\n", argv[1]);
        return 2;
    }
    double secs = atof(argv[3]), start = now(), end = start + secs;
    long done = 0, failed = 0;
    struct linger lg = {1, 0};
    char b = 'x';
    while (now() < end) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) { perror("socket"); return 1; }
        if (!fin) setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 || write(fd, &b, 1) != 1 ||
            read(fd, &b, 1) != 1 || (fin && read(fd, &b, 1) != 0)) {
            failed++;
        } else {
            done++;
        }
        close(fd);
    }
    printf("%.0f %ld\n", done / (now() - start), failed);
    return 0;
}
