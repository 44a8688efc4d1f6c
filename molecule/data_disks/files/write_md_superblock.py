"""Write a Linux md RAID v1.2 member superblock (4 KiB into the device), as `mdadm --create` would.

The lab's kernel has no md driver, so mdadm cannot create an array; blkid only needs the superblock
(magic, version, super_offset, checksum) to report the device as `linux_raid_member`.
"""

import os
import struct
import sys
import uuid

MD_MAGIC = 0xA92B4EFC
OFFSET = 4096
MAX_DEV = 2

sb = bytearray(256 + 2 * MAX_DEV)
struct.pack_into("<IIII", sb, 0, MD_MAGIC, 1, 0, 0)  # magic, major_version, feature_map, pad
sb[16:32] = uuid.uuid4().bytes  # set_uuid
sb[32:40] = b"lab:md0\0"  # set_name
struct.pack_into("<Q", sb, 64, 1700000000)  # ctime
struct.pack_into("<iI", sb, 72, 1, 0)  # level 1 (mirror), layout
struct.pack_into("<QII", sb, 80, 65536, 0, 2)  # size (sectors), chunksize, raid_disks
struct.pack_into("<QQQ", sb, 128, 2048, 65536, OFFSET // 512)  # data_offset, data_size, super_offset
struct.pack_into("<I", sb, 160, 0)  # dev_number
sb[168:184] = uuid.uuid4().bytes  # device_uuid
struct.pack_into("<QQ", sb, 192, 1700000000, 1)  # utime, events
struct.pack_into("<Q", sb, 208, 0xFFFFFFFFFFFFFFFF)  # resync_offset: clean
struct.pack_into("<I", sb, 220, MAX_DEV)  # max_dev
struct.pack_into("<HH", sb, 256, 0, 1)  # dev_roles

# The kernel's calc_sb_1_csum: 32-bit little-endian words summed with sb_csum as 0, carry folded.
struct.pack_into("<I", sb, 216, 0)
total = sum(struct.unpack_from(f"<{len(sb) // 4}I", sb))
if len(sb) % 4:
    total += struct.unpack_from("<H", sb, len(sb) - 2)[0]
csum = ((total & 0xFFFFFFFF) + (total >> 32)) & 0xFFFFFFFF
struct.pack_into("<I", sb, 216, csum)

fd = os.open(sys.argv[1], os.O_WRONLY)
try:
    os.pwrite(fd, bytes(sb), OFFSET)
    os.fsync(fd)
finally:
    os.close(fd)
