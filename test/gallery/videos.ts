import { execFileSync } from 'node:child_process';

/** A real, playable MP4 of `width` × `height`, made by ffmpeg: a red first frame, then blue ones (a poster must be the first). */
export function realVideo(ffmpeg: string, target: string, width: number, height: number): void {
  const filter = `color=c=red:s=${width}x${height}:r=10:d=0.1[a];color=c=blue:s=${width}x${height}:r=10:d=0.4[b];[a][b]concat=n=2:v=1`;
  execFileSync(ffmpeg, ['-nostdin', '-v', 'error', '-y', '-filter_complex', filter, '-pix_fmt', 'yuv420p', target]);
}
