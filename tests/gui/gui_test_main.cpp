// The GUI tests need a QApplication; without a display they use Qt's offscreen platform (ctest sets
// QT_QPA_PLATFORM=offscreen; test discovery at build time gets the same default here).
#include <gtest/gtest.h>
#include <QApplication>

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
