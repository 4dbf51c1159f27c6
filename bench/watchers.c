/* Watchers for bench/fanout.py that cost next to nothing: WebSocket subscribers
 * of runstate (graphql-transport-ws) or raw Redis SUBSCRIBE connections, all in
 * one process on epoll, so that the server's figures are the server's.
 *
 *   watchers runstate COUNT FIRST LAST URLS TOKEN TASK_IDS QUERY
 *   watchers redis    COUNT FIRST LAST HOST:PORT - CHANNELS -
 *
 * URLS: host:port,host:port,...; TASK_IDS, CHANNELS: one or more, comma-separated.
 * Watcher i (from FIRST) connects to URLS[i % len(URLS)] and watches
 * TASK_IDS[(i / len(URLS)) % len(TASK_IDS)], so that every task has watchers on
 * every server. A runstate watcher is ready once its SNAPSHOT has come; a
 * Redis one once its subscription is confirmed. Prints "ready" when all are,
 * then waits for every watcher to receive seq LAST (or 120 s) and prints one
 * JSON line: {"got": [[[seq, t], ...], ...], "cpu": s}, t the receipt time on
 * CLOCK_MONOTONIC (Python's time.perf_counter), seq the "seq" of each "next"
 * message (runstate) or the message itself (Redis). bench/fanout.py compiles
 * it with gcc. */

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUFFER (1 << 18)
#define MAX_SEEN 4096

typedef struct {
    int fd;
    char *buffer;
    size_t used;
    int count;
    long *seqs;
    double *times;
    long last;
} Watcher;

static int redis_mode;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static int dial(const char *address) {
    char host[256];
    const char *colon = strrchr(address, ':');
    if (colon == NULL || colon - address >= (long)sizeof host) {
        fprintf(stderr, "bad address %s\n", address);
        exit(1);
    }
    memcpy(host, address, colon - address);
    host[colon - address] = 0;
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &to.sin_addr) != 1) {
        fprintf(stderr, "not an IPv4 address: %s\n", host);
        exit(1);
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) die("socket");
    if (connect(fd, (struct sockaddr *)&to, sizeof to) < 0) die("connect");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void send_all(int fd, const char *data, size_t length) {
    while (length > 0) {
        ssize_t sent = send(fd, data, length, 0);
        if (sent < 0) {
            if (errno == EINTR) continue;
            die("send");
        }
        data += sent;
        length -= sent;
    }
}

/* A client frame: FIN, the opcode, masked (with a zero mask: the payload as is). */
static void send_frame(int fd, int opcode, const char *payload, size_t length) {
    char header[14];
    size_t used = 0;
    header[used++] = (char)(0x80 | opcode);
    if (length < 126) {
        header[used++] = (char)(0x80 | length);
    } else {
        header[used++] = (char)(0x80 | 126);
        header[used++] = (char)(length >> 8);
        header[used++] = (char)(length & 0xff);
    }
    memset(header + used, 0, 4);
    used += 4;
    send_all(fd, header, used);
    send_all(fd, payload, length);
}

/* Receive more into the watcher's buffer, blocking; 0 when the peer closed. */
static ssize_t fill(Watcher *w) {
    if (w->used == BUFFER) {
        fprintf(stderr, "frame larger than the buffer\n");
        exit(1);
    }
    ssize_t got = recv(w->fd, w->buffer + w->used, BUFFER - w->used, 0);
    if (got > 0) w->used += got;
    return got;
}

static void consume(Watcher *w, size_t length) {
    memmove(w->buffer, w->buffer + length, w->used - length);
    w->used -= length;
}

/* The next whole server frame in the buffer: its opcode, payload and length (0
 * when none is whole yet). The caller consumes *frame_length bytes. */
static int frame(Watcher *w, char **payload, size_t *length, size_t *frame_length) {
    if (w->used < 2) return 0;
    unsigned char *b = (unsigned char *)w->buffer;
    size_t header = 2, size = b[1] & 0x7f;
    if (size == 126) {
        if (w->used < 4) return 0;
        size = ((size_t)b[2] << 8) | b[3];
        header = 4;
    } else if (size == 127) {
        if (w->used < 10) return 0;
        size = 0;
        for (int i = 2; i < 10; i++) size = (size << 8) | b[i];
        header = 10;
    }
    if (w->used < header + size) return 0;
    *payload = w->buffer + header;
    *length = size;
    *frame_length = header + size;
    return b[0] & 0x0f;
}

static void record(Watcher *w, long seq, double at) {
    if (w->count < MAX_SEEN) {
        w->seqs[w->count] = seq;
        w->times[w->count] = at;
        w->count++;
    }
    if (seq > w->last) w->last = seq;
}

/* Handle every whole frame in the buffer; returns how many "next" messages came. */
static int frames(Watcher *w, int live) {
    int nexts = 0;
    char *payload;
    size_t length, whole;
    int opcode;
    while ((opcode = frame(w, &payload, &length, &whole)) != 0) {
        if (opcode == 0x9) {
            send_frame(w->fd, 0xA, payload, length);
        } else if (opcode == 0x8) {
            fprintf(stderr, "server closed a watcher's socket\n");
            exit(1);
        } else if (opcode == 0x1) {
            char *end = payload + length, saved = *end;
            *end = 0;
            if (strstr(payload, "\"type\":\"next\"") != NULL) {
                nexts++;
                char *seq = strstr(payload, "\"seq\":");
                if (live && seq != NULL) record(w, strtol(seq + 6, NULL, 10), now());
            } else if (strstr(payload, "\"type\":\"connection_ack\"") == NULL) {
                fprintf(stderr, "unexpected message: %.300s\n", payload);
                exit(1);
            }
            *end = saved;
        }
        consume(w, whole);
    }
    return nexts;
}

/* Whole RESP messages in the buffer: ``*3 $7 message $n channel $m payload``;
 * the payload is the seq. Returns the number of confirmations of SUBSCRIBE. */
static int replies(Watcher *w, int live) {
    int subscribed = 0;
    for (;;) {
        char *p = w->buffer, *end = w->buffer + w->used;
        if (p == end || *p != '*') break;
        char *line = memmem(p, end - p, "\r\n", 2);
        if (line == NULL) break;
        long items = strtol(p + 1, NULL, 10);
        p = line + 2;
        char *parts[3] = {0};
        long sizes[3] = {0};
        int whole = 1;
        for (long i = 0; i < items; i++) {
            line = memmem(p, end - p, "\r\n", 2);
            if (line == NULL) { whole = 0; break; }
            long size = *p == '$' ? strtol(p + 1, NULL, 10) : -1;
            char *value = *p == '$' ? line + 2 : p + 1;
            if (size < 0) size = line - value;
            if (*p == '$' && end - value < size + 2) { whole = 0; break; }
            if (i < 3) { parts[i] = value; sizes[i] = size; }
            p = (*p == '$' ? value + size : line) + 2;
        }
        if (!whole) break;
        if (items >= 3 && sizes[0] == 7 && memcmp(parts[0], "message", 7) == 0) {
            if (live) record(w, strtol(parts[2], NULL, 10), now());
        } else if (items >= 1 && sizes[0] == 9 && memcmp(parts[0], "subscribe", 9) == 0) {
            subscribed++;
        }
        consume(w, p - w->buffer);
    }
    return subscribed;
}

static void open_runstate(Watcher *w, const char *address, const char *token,
                          const char *task, const char *query) {
    w->fd = dial(address);
    char request[1024];
    int length = snprintf(request, sizeof request,
        "GET /graphql HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n", address);
    send_all(w->fd, request, length);
    char *headers_end;
    while ((headers_end = memmem(w->buffer, w->used, "\r\n\r\n", 4)) == NULL)
        if (fill(w) <= 0) die("handshake");
    if (strncmp(w->buffer, "HTTP/1.1 101", 12) != 0) {
        fprintf(stderr, "handshake refused: %.200s\n", w->buffer);
        exit(1);
    }
    consume(w, headers_end + 4 - w->buffer);
    char message[4096];
    length = snprintf(message, sizeof message,
        "{\"type\":\"connection_init\",\"payload\":{\"authorization\":\"Bearer %s\"}}", token);
    send_frame(w->fd, 0x1, message, length);
    length = snprintf(message, sizeof message,
        "{\"id\":\"1\",\"type\":\"subscribe\",\"payload\":{\"query\":\"%s\","
        "\"variables\":{\"id\":\"%s\"}}}", query, task);
    send_frame(w->fd, 0x1, message, length);
    while (frames(w, 0) == 0)  /* the ack, then the SNAPSHOT */
        if (fill(w) <= 0) die("subscribe");
}

static void open_redis(Watcher *w, const char *address, const char *channel) {
    w->fd = dial(address);
    char command[512];
    int length = snprintf(command, sizeof command, "*2\r\n$9\r\nSUBSCRIBE\r\n$%zu\r\n%s\r\n",
                          strlen(channel), channel);
    send_all(w->fd, command, length);
    while (replies(w, 0) == 0)
        if (fill(w) <= 0) die("subscribe");
}

int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: watchers runstate|redis COUNT FIRST LAST URLS TOKEN TARGETS QUERY\n");
        return 2;
    }
    redis_mode = strcmp(argv[1], "redis") == 0;
    int count = atoi(argv[2]), first = atoi(argv[3]);
    long last = atol(argv[4]);
    char *urls[64], *targets[1024], *rest;
    int servers = 0, watched = 0;
    for (char *u = strtok_r(argv[5], ",", &rest); u != NULL && servers < 64;
         u = strtok_r(NULL, ",", &rest))
        urls[servers++] = u;
    for (char *t = strtok_r(argv[7], ",", &rest); t != NULL && watched < 1024;
         t = strtok_r(NULL, ",", &rest))
        targets[watched++] = t;
    Watcher *watchers = calloc(count, sizeof *watchers);
    int poll = epoll_create1(0);
    for (int i = 0; i < count; i++) {
        Watcher *w = &watchers[i];
        w->buffer = malloc(BUFFER);
        w->seqs = malloc(MAX_SEEN * sizeof *w->seqs);
        w->times = malloc(MAX_SEEN * sizeof *w->times);
        const char *address = urls[(first + i) % servers];
        const char *target = targets[((first + i) / servers) % watched];
        if (redis_mode) open_redis(w, address, target);
        else open_runstate(w, address, argv[6], target, argv[8]);
        struct epoll_event event = {.events = EPOLLIN, .data.ptr = w};
        if (epoll_ctl(poll, EPOLL_CTL_ADD, w->fd, &event) < 0) die("epoll_ctl");
    }
    printf("ready\n");
    fflush(stdout);
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    double cpu = usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
                 usage.ru_stime.tv_usec / 1e6;
    int done = 0;
    double deadline = now() + 120;
    struct epoll_event ready[256];
    while (done < count && now() < deadline) {
        int n = epoll_wait(poll, ready, 256, 1000);
        for (int i = 0; i < n; i++) {
            Watcher *w = ready[i].data.ptr;
            int finished = w->last >= last;
            ssize_t got = fill(w);
            if (got == 0) {
                fprintf(stderr, "a watcher's socket closed\n");
                return 1;
            }
            if (got < 0) continue;
            if (redis_mode) replies(w, 1);
            else frames(w, 1);
            if (!finished && w->last >= last) done++;
        }
    }
    getrusage(RUSAGE_SELF, &usage);
    cpu = usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
          usage.ru_stime.tv_usec / 1e6 - cpu;
    printf("{\"got\": [");
    for (int i = 0; i < count; i++) {
        printf(i ? ", [" : "[");
        for (int j = 0; j < watchers[i].count; j++)
            printf(j ? ", [%ld, %.6f]" : "[%ld, %.6f]", watchers[i].seqs[j], watchers[i].times[j]);
        printf("]");
    }
    printf("], \"cpu\": %.3f}\n", cpu);
    return 0;
}
