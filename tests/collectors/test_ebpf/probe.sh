read go < /g/go
cd /tmp
echo hi > a.txt; mv a.txt b.txt; rm b.txt; mkdir d; rmdir d
sh -c 'cat /etc/hostname
echo two lines' > /dev/null
/u/uring_open /etc/hostname > /dev/null
python3 -S -c "
import socket, threading, os
s = socket.socket(); s.settimeout(0.2)
try: s.connect(('10.1.2.3', 80))
except OSError: pass
u = socket.socket(socket.AF_UNIX)
try: u.connect('/tmp/nope.sock')
except OSError: pass
t = threading.Thread(target=lambda: open('/etc/hostname').read()); t.start(); t.join()
fd = os.open('/etc', os.O_RDONLY); os.fchdir(fd); open('hostname').read()
os.chdir('/usr'); os.close(os.open('lib', os.O_RDONLY | os.O_DIRECTORY))
"
python3 -S -c "
import os
e = os.open('/etc', os.O_RDONLY); u = os.open('/usr', os.O_RDONLY)
os.close(e); os.dup2(u, e)
os.close(os.open('share', os.O_RDONLY | os.O_DIRECTORY, dir_fd=e))
os.close(os.open('/etc/' + './' * 120 + 'hostname', os.O_RDONLY))
os.symlink('/etc/hostname', 'h'); os.close(os.open('h', os.O_RDONLY)); os.unlink('h')
os.close(os.open('/proc/self/fd/%d/share' % u, os.O_RDONLY | os.O_DIRECTORY))
"
echo $(seq 100) > /dev/null; /bin/echo $(seq 100) > /dev/null
sleep 5 & kill -9 $!; wait
exit 3
