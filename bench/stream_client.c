/* The load generator of bench/slow_streams.py: N streamed calls opened at once,
 * one connection each, on one thread with epoll, so that the client is not
 * what a 2-core machine runs out of (issue 45: the asyncio client took most of
 * a core while the burst went in, beside the server it measured).
 *
 *     stream_client PORT REQUEST_FILE STREAMS TIMEOUT_SECONDS
 *
 * Sends REQUEST_FILE (a whole HTTP/1.1 request with "connection: close") on
 * each connection and reads the answer as bench/slow_streams.py's asyncio
 * client does: a status line other than "HTTP/1.1 200" is an error; the first
 * read holding "data:" is the first token; a read holding "\"error\"" is an
 * error event; "data: [DONE]" in the last 64 bytes read is the end.
 *
 * Prints "start MONOTONIC REALTIME", then a line per stream, "FIRST END ERROR"
 * (CLOCK_MONOTONIC seconds, -1 where none; ERROR "-" where none), then
 * "cpu SECONDS" (its user and system time).
 *
 * Built by bench/slow_streams.py with the machine's C compiler. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { SENDING, HEAD, BODY, DONE };

typedef struct {
    int fd;
    int state;
    size_t sent;
    double first, end;
    const char *error;
    char head[8192];
    size_t head_len;
    char tail[64];
    size_t tail_len;
} Stream;

static double now(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static char *request;
static size_t request_len;

static void finish(int epoll, Stream *s, const char *error, int *open) {
    if (error && !s->error) s->error = error;
    s->state = DONE;
    epoll_ctl(epoll, EPOLL_CTL_DEL, s->fd, NULL);
    close(s->fd);
    (*open)--;
}

/* Body bytes, as the asyncio client reads them: one read at a time. */
static void body(int epoll, Stream *s, const char *data, size_t len, double t, int *open) {
    if (len == 0) return;
    if (s->first < 0 && memmem(data, len, "data:", 5)) s->first = t;
    if (memmem(data, len, "\"error\"", 7)) {
        finish(epoll, s, "error_event", open);
        return;
    }
    /* the last 64 bytes read, across reads */
    if (len >= sizeof s->tail) {
        memcpy(s->tail, data + len - sizeof s->tail, sizeof s->tail);
        s->tail_len = sizeof s->tail;
    } else {
        size_t keep = s->tail_len + len > sizeof s->tail ? sizeof s->tail - len : s->tail_len;
        memmove(s->tail, s->tail + s->tail_len - keep, keep);
        memcpy(s->tail + keep, data, len);
        s->tail_len = keep + len;
    }
    if (memmem(s->tail, s->tail_len, "data: [DONE]", 12)) {
        s->end = t;
        finish(epoll, s, NULL, open);
    }
}

static void readable(int epoll, Stream *s, int *open) {
    char buf[65536];
    for (;;) {
        ssize_t got = recv(s->fd, buf, sizeof buf, 0);
        if (got < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            finish(epoll, s, "recv_error", open);
            return;
        }
        if (got == 0) {
            finish(epoll, s, s->state == HEAD ? "closed_before_head" : "closed_before_done", open);
            return;
        }
        double t = now(CLOCK_MONOTONIC);
        if (s->state == BODY) {
            body(epoll, s, buf, (size_t)got, t, open);
        } else {
            size_t room = sizeof s->head - s->head_len;
            size_t take = (size_t)got < room ? (size_t)got : room;
            memcpy(s->head + s->head_len, buf, take);
            s->head_len += take;
            char *end = memmem(s->head, s->head_len, "\r\n\r\n", 4);
            if (!end) {
                if (s->head_len == sizeof s->head) finish(epoll, s, "head_too_long", open);
                continue;
            }
            if (strncmp(s->head, "HTTP/1.1 200", 12) != 0) {
                finish(epoll, s, "status_not_200", open);
                return;
            }
            s->state = BODY;
            size_t head_bytes = (size_t)(end + 4 - s->head);
            /* what came with the head: the rest of this read */
            size_t before = s->head_len - take;
            size_t rest_at = head_bytes - before;
            body(epoll, s, buf + rest_at, (size_t)got - rest_at, t, open);
        }
        if (s->state == DONE) return;
    }
}

static void writable(int epoll, Stream *s, int *open) {
    if (s->sent == 0) {
        int error = 0;
        socklen_t len = sizeof error;
        getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &error, &len);
        if (error) {
            finish(epoll, s, "connect_error", open);
            return;
        }
    }
    while (s->sent < request_len) {
        ssize_t put = send(s->fd, request + s->sent, request_len - s->sent, MSG_NOSIGNAL);
        if (put < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            finish(epoll, s, "send_error", open);
            return;
        }
        s->sent += (size_t)put;
    }
    s->state = HEAD;
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.ptr = s;
    epoll_ctl(epoll, EPOLL_CTL_MOD, s->fd, &ev);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s PORT REQUEST_FILE STREAMS TIMEOUT_SECONDS\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    int n = atoi(argv[3]);
    double timeout = atof(argv[4]);
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    request_len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    request = malloc(request_len);
    if (fread(request, 1, request_len, f) != request_len) {
        perror(argv[2]);
        return 2;
    }
    fclose(f);

    struct rlimit limit;
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);

    Stream *streams = calloc((size_t)n, sizeof(Stream));
    int epoll = epoll_create1(0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);

    double started = now(CLOCK_MONOTONIC);
    printf("start %.6f %.6f\n", started, now(CLOCK_REALTIME));
    fflush(stdout); /* read at once: the burst's start */
    int open = 0;
    for (int i = 0; i < n; i++) {
        Stream *s = &streams[i];
        s->first = s->end = -1;
        s->state = SENDING;
        s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (s->fd < 0) {
            s->error = "socket_error";
            s->state = DONE;
            continue;
        }
        if (connect(s->fd, (struct sockaddr *)&to, sizeof to) < 0 && errno != EINPROGRESS) {
            s->error = "connect_error";
            s->state = DONE;
            close(s->fd);
            continue;
        }
        struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN};
        ev.data.ptr = s;
        epoll_ctl(epoll, EPOLL_CTL_ADD, s->fd, &ev);
        open++;
    }

    struct epoll_event events[1024];
    while (open > 0) {
        double left = started + timeout - now(CLOCK_MONOTONIC);
        if (left <= 0) break;
        int ready = epoll_wait(epoll, events, 1024, left < 1 ? (int)(left * 1000) + 1 : 1000);
        for (int i = 0; i < ready; i++) {
            Stream *s = events[i].data.ptr;
            if (s->state == DONE) continue;
            if (s->state == SENDING && (events[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) writable(epoll, s, &open);
            if (s->state != SENDING && s->state != DONE && (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
                readable(epoll, s, &open);
        }
    }
    for (int i = 0; i < n; i++) {
        Stream *s = &streams[i];
        if (s->state != DONE) {
            s->error = "client_timeout";
            close(s->fd);
        }
        printf("%.6f %.6f %s\n", s->first, s->end, s->error ? s->error : "-");
    }
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    printf("cpu %.6f\n", usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
                             usage.ru_stime.tv_usec / 1e6);
    return 0;
}
