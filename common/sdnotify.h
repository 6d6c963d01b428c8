/* Service readiness for systemd's Type=notify units, without libsystemd:
 * the sd_notify(3) datagram protocol written out (one AF_UNIX datagram of
 * newline-separated VAR=value lines to the socket named by $NOTIFY_SOCKET,
 * a path or, starting with '@', a name in the abstract namespace). The
 * broker and the controller say READY=1 once they serve, STOPPING=1 when they
 * begin to stop, and STATUS=... lines that `systemctl status` shows. Outside
 * systemd (no NOTIFY_SOCKET) nothing is sent; a failure to send is logged
 * once and never stops the caller: readiness is advice to the supervisor,
 * not part of serving. */
#ifndef SLUICE_SDNOTIFY_H
#define SLUICE_SDNOTIFY_H

#define SLUICE_SDNOTIFY_BYTES_MAX 2048 /* one notification's text at most (systemd reads up to 4 KiB) */

/* Sends state (e.g. "READY=1\nSTATUS=serving") to $NOTIFY_SOCKET. Returns 1
 * when sent, 0 when there is no NOTIFY_SOCKET, -1 when it could not be sent
 * (the first such failure is logged under area "systemd"). Thread-safe. */
int sluice_sdnotify_send(const char *state);
/* The same with printf formatting; a text longer than
 * SLUICE_SDNOTIFY_BYTES_MAX - 1 is refused (-1), never cut. */
int sluice_sdnotify_sendf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Fills *addr (a struct sockaddr_un) from a NOTIFY_SOCKET value and returns
 * its length, or -1 with *why set when the value is not a path ('/...') or
 * an abstract name ('@...') that fits sun_path. Pure; for the unit tests. */
struct sockaddr_un;
int sluice_sdnotify_address(const char *value, struct sockaddr_un *addr, const char **why);

#endif
