/* Wine 8.0 (Debian 12) has no bcryptprimitives.dll, which Rust's standard library imports on
 * Windows for ProcessPrng (random seeds for HashMap). Windows 10 and later ship it. For the
 * Wine smoke tests only, this DLL provides ProcessPrng over RtlGenRandom (advapi32's
 * SystemFunction036), which Wine has. It is placed beside hakaru.exe in the test build
 * directory, never shipped. Built by .ci/run:
 *   x86_64-w64-mingw32-gcc -shared -O2 -o bcryptprimitives.dll bcryptprimitives.c -ladvapi32
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
