/* sd_notify's datagram protocol (common/sdnotify.c) against a real AF_UNIX
 * datagram socket standing in for systemd: NOTIFY_SOCKET values turned into
 * addresses (paths, abstract names, and the refused ones), a notification
 * received byte for byte on both kinds of socket, nothing sent when the
 * variable is unset, and a socket nobody listens on reported, not fatal. */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "common/sdnotify.h"

Test(sdnotify, a_path_keeps_its_nul_an_abstract_name_starts_with_one)
{
	struct sockaddr_un a;
	const char *why = NULL;
	int len = sluice_sdnotify_address("/run/systemd/notify", &a, &why);
	cr_assert_eq(len, (int)(offsetof(struct sockaddr_un, sun_path) + strlen("/run/systemd/notify") + 1));
	cr_assert_str_eq(a.sun_path, "/run/systemd/notify");
	len = sluice_sdnotify_address("@sluice/notify", &a, &why);
	cr_assert_eq(len, (int)(offsetof(struct sockaddr_un, sun_path) + strlen("@sluice/notify")));
	cr_assert_eq(a.sun_path[0], '\0');
	cr_assert(memcmp(a.sun_path + 1, "sluice/notify", 13) == 0);
}

Test(sdnotify, relative_empty_and_oversized_values_are_refused)
{
	struct sockaddr_un a;
	const char *why = NULL;
	cr_assert_eq(sluice_sdnotify_address("run/notify", &a, &why), -1);
	cr_assert_not_null(why);
	cr_assert_eq(sluice_sdnotify_address("", &a, &why), -1);
	cr_assert_eq(sluice_sdnotify_address("@", &a, &why), -1);
	cr_assert_eq(sluice_sdnotify_address("vsock:2:1234", &a, &why), -1, "vsock addresses are not supported");
	char longest[sizeof a.sun_path + 2];
	/* A path fills sun_path with its NUL; an abstract name, having none, one byte more. */
	memset(longest, 'x', sizeof longest);
	longest[0] = '/';
	longest[sizeof a.sun_path - 1] = '\0';
	cr_assert_gt(sluice_sdnotify_address(longest, &a, &why), 0, "a path of sizeof sun_path - 1 bytes fits");
	longest[sizeof a.sun_path - 1] = 'x';
	longest[sizeof a.sun_path] = '\0';
	cr_assert_eq(sluice_sdnotify_address(longest, &a, &why), -1, "a path of sizeof sun_path bytes does not");
	longest[0] = '@';
	cr_assert_gt(sluice_sdnotify_address(longest, &a, &why), 0, "an abstract name of sizeof sun_path bytes fits");
	longest[sizeof a.sun_path] = 'x';
	longest[sizeof a.sun_path + 1] = '\0';
	cr_assert_eq(sluice_sdnotify_address(longest, &a, &why), -1);
}

/* A bound datagram socket: at path, or at the abstract name when path starts with '@'. */
static int listener(const char *name)
{
	struct sockaddr_un a;
	const char *why = NULL;
	int len = sluice_sdnotify_address(name, &a, &why);
	cr_assert_gt(len, 0);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, (socklen_t)len), 0);
	return fd;
}

static void received(int fd, const char *want)
{
	char buf[SLUICE_SDNOTIFY_BYTES_MAX + 1];
	ssize_t n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
	cr_assert_eq(n, (ssize_t)strlen(want), "received %zd bytes, want %zu", n, strlen(want));
	buf[n] = '\0';
	cr_assert_str_eq(buf, want);
}

Test(sdnotify, notifications_arrive_whole_on_a_path_and_an_abstract_name)
{
	char dir[] = "/tmp/sluice-sdnotify-XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	char path[128];
	snprintf(path, sizeof path, "%s/notify", dir);
	int fd = listener(path);
	setenv("NOTIFY_SOCKET", path, 1);
	cr_assert_eq(sluice_sdnotify_send("READY=1\nSTATUS=serving"), 1);
	received(fd, "READY=1\nSTATUS=serving");
	cr_assert_eq(sluice_sdnotify_sendf("STATUS=node %d", 7), 1);
	received(fd, "STATUS=node 7");
	close(fd);
	unlink(path);
	rmdir(dir);

	char abstract[64];
	snprintf(abstract, sizeof abstract, "@sluice-sdnotify-test-%d", (int)getpid());
	fd = listener(abstract);
	setenv("NOTIFY_SOCKET", abstract, 1);
	cr_assert_eq(sluice_sdnotify_send("STOPPING=1"), 1);
	received(fd, "STOPPING=1");
	close(fd);
	unsetenv("NOTIFY_SOCKET");
}

Test(sdnotify, unset_sends_nothing_and_a_dead_socket_is_an_error_not_a_crash)
{
	unsetenv("NOTIFY_SOCKET");
	cr_assert_eq(sluice_sdnotify_send("READY=1"), 0);
	cr_assert_eq(sluice_sdnotify_sendf("STATUS=%s", "x"), 0);
	setenv("NOTIFY_SOCKET", "", 1);
	cr_assert_eq(sluice_sdnotify_send("READY=1"), 0, "an empty NOTIFY_SOCKET is unset");
	setenv("NOTIFY_SOCKET", "/nonexistent-sluice-dir/notify", 1);
	cr_assert_eq(sluice_sdnotify_send("READY=1"), -1);
	cr_assert_eq(sluice_sdnotify_send("READY=1"), -1, "and again (logged once)");
	setenv("NOTIFY_SOCKET", "relative/notify", 1);
	cr_assert_eq(sluice_sdnotify_send("READY=1"), -1);
	char big[SLUICE_SDNOTIFY_BYTES_MAX + 8];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	cr_assert_eq(sluice_sdnotify_sendf("STATUS=%s", big), -1, "too long: refused, not cut");
	unsetenv("NOTIFY_SOCKET");
}
