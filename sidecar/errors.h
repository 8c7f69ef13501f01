/*
 * errors.h — the project's error codes.
 *
 * Every function that can fail returns 0 or one of these negative values
 * (libuv's style).  libuv and ZooKeeper codes are translated at the boundary
 * that sees them: they collide (UV_EPERM and ZSYSTEMERROR are both -1), so
 * they never travel through the project untranslated.
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
