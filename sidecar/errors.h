/*
 * errors.h — the project's error codes.
 *
 * Every function that can fail returns 0 or one of these negative values
 * (libuv's style), never a libuv or ZooKeeper code: those collide with these
 * and with each other (UV_EPERM, ZSYSTEMERROR and ZR_ENOMEM are all -1), so
 * a function's return value is translated at the boundary that sees them.
 *
 * The one place ZooKeeper's codes travel is the result of an operation:
 * struct zk_result's rc (zk.h), handed to the operation's callback, and from
 * there to Lua as the rc of a zk.* call, compared with the zk.* constants
 * (lua_host.h).  That rc is ZooKeeper's code or the bridge's own (ZK_TIMEOUT,
 * ZK_CLOSING, ZK_TOOBIG, all <= -1000), never a ZR_* code, and never a
 * function's return value.
 */
#ifndef ZKRESP_ERRORS_H
#define ZKRESP_ERRORS_H

enum zr_err {
    ZR_OK = 0,
    ZR_ENOMEM = -1,  /* allocation failed */
    ZR_EINVAL = -2,  /* bad argument or configuration */
    ZR_EPROTO = -3,  /* malformed client request */
    ZR_ELIMIT = -4,  /* a configured limit was exceeded */
    ZR_EIO = -5,     /* socket or file error */
    ZR_EZK = -6,     /* ZooKeeper client error */
    ZR_ELUA = -7,    /* Lua error (load, runtime) */
    ZR_ECLOSED = -8, /* the object is closing or closed */
};

#endif
